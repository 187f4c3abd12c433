#pragma once
// The launcher's side of c10d rendezvous. The rendezvous itself runs in
// ddp-rdzv (launcher/rdzv/), a helper beside ddp-launch that blocks on the
// rendezvous store (and serves it on the node that hosts it) so the
// launcher's loop never does; ddp-launch starts it only for --rdzv_backend
// c10d. The two talk
// over a pipe each way, one line per message (ddp/rdzv/agent_lines.h, which
// both compile, has the protocol); parse_rdzv_line() is pure so tests check
// it without processes.
// The helper leads its own process group (Ctrl-C is the launcher's to
// forward) and dies with the launcher (PR_SET_PDEATHSIG).
// Liveness: the launcher writes `ping` every keep_alive_interval / 2 from
// its poll loops (ms_to_ping() is their timeout, ping_if_due() after each
// poll); the helper heartbeats for this node only while the launcher's last
// line is younger than keep_alive_interval * keep_alive_max_attempt, so a
// launcher that is stopped (SIGSTOP) or hung is a lost node, not a node whose
// helper and workers go on without it.

#include "ddp/launcher/config/options.h"
#include "ddp/launcher/config/worker_env.h"
#include "ddp/rdzv/agent_lines.h"

#include <chrono>
#include <cstdint>
#include <csignal>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

struct RdzvEvent {
  enum Kind { Round, Restart, Abort, Aborted, Finished, Error, JobSteps, Recovery, RecoveryRefused, PeerRecovery } kind =
      Error;
  // Round: the round's number, its restart count and this node's place.
  int round = 0;
  int restart_count = 0;
  NodePlacement placement;
  int master_port = 0;
  // Round: hot spares that took the places of nodes that did not come back
  // (agent_lines.h's Round::replaced).
  std::string replaced;
  // Recovery (this node's, granted), RecoveryRefused, PeerRecovery (another
  // node's): the job-wide generation, the job's restarts and recoveries
  // before it, whether they used --max_restarts up (RecoveryRefused) and the
  // rank lost (PeerRecovery; text: its node, RecoveryRefused: why not).
  uint64_t generation = 0;
  int used = 0;
  bool used_up = false;
  int rank = -1;
  bool counted = true;  // Restart: counts against --max_restarts (a failure, a node lost)
  std::string text;     // Restart/Abort: the reason; Finished: what cut the exit barrier short; Error: the message;
                        // JobSteps: every node's last window of steps (parse_job_windows)
};

// One line of the helper. A line it cannot parse is an Error naming it.
RdzvEvent parse_rdzv_line(const std::string& line);

// ddp-rdzv beside this executable (/proc/self/exe).
std::string rdzv_helper_path();

class RdzvAgent {
 public:
  // Starts the helper for this node (nproc workers). Throws std::runtime_error
  // (the helper is missing or cannot start) with a message that says what to do.
  RdzvAgent(const LaunchOptions& opts, int nproc, const sigset_t& child_mask);
  ~RdzvAgent();  // closes its stdin (it exits) and waits briefly for it
  RdzvAgent(const RdzvAgent&) = delete;
  RdzvAgent& operator=(const RdzvAgent&) = delete;

  int fd() const { return from_; }
  void send(rdzv::lines::Command command, const std::string& arg = "") {
    send(rdzv::lines::format_command(command, arg));
  }
  // The complete lines the helper has written so far (call when fd() is
  // readable). Its exit without a final line is one Error event.
  std::vector<RdzvEvent> read();
  bool gone() const { return eof_; }
  // What the launcher says when the helper exits without a final line.
  const std::string& exit_text() const { return exit_text_; }
  // Milliseconds until the next ping is due (0: now): a poll loop's timeout.
  int ms_to_ping() const;
  // Writes `ping` when it is due; never blocks (a full pipe skips this one).
  void ping_if_due();

 private:
  void send(const std::string& line);

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string pending_;
  bool eof_ = false;
  std::string exit_text_;
  std::chrono::steady_clock::duration ping_every_{};
  std::chrono::steady_clock::time_point next_ping_{};
};

}  // namespace ddp::launcher
