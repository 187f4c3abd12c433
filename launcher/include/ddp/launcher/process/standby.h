#pragma once
// A pre-started standby worker: at most one process per node, spawned like a
// worker (spawn.h: its own process group, PR_SET_PDEATHSIG, the launcher's
// original signal mask) but without a rank's identity, that waits before
// main, with LibTorch loaded, until adopt() makes it the worker of a local
// rank (the wire: common/standby_protocol.h). An in-place recovery's
// returning rank then skips most of its start-up.
// Owns: the process and the launcher's end of its socket. WorkerGroup::adopt
// is its only caller of adopt(), the attempt (attempt.h) of the rest.
// Never:
//  - gives a rank's identity at start: RANK, LOCAL_RANK, WORLD_SIZE, the
//    MASTER_* address, the TORCHELASTIC_* values, the heartbeat and error
//    files are removed from its environment (standby_environment), so a
//    program that ignores DDP_STANDBY_FD cannot join the job as a second rank;
//  - is adopted unless it said "ready" (adopt() waits a few seconds for a
//    standby still loading: it is ahead of a fresh start), its program and
//    number of arguments are the rank's (the values are sent: --local_rank=N
//    differs by rank), no CPU binding is asked (--numa_binding) and the rank
//    does not keep the launcher's terminal (a session of its own); nor before
//    the standby confirmed that its arguments, every fd and the environment
//    are installed: otherwise the caller spawns the rank afresh;
//  - counts as a worker: its exit before adoption is no failure (died()).
// The watchdog hears of its group at start(); after adopt() the group is the
// worker's, and WorkerGroup owns it from then on.

#include "ddp/launcher/config/options.h"
#include "ddp/launcher/process/spawn.h"

#include <csignal>
#include <string>
#include <sys/types.h>

namespace ddp::launcher {

class Watchdog;

// A rank's environment without its identity (see above), plus nothing else.
EnvMap standby_environment(const EnvMap& rank_env);

class Standby {
 public:
  // How long adopt() waits for a standby still loading its libraries: about
  // a fresh start's time on a loaded machine.
  static constexpr int kReadyWaitMs = 5000;

  // child_mask: the signal mask workers get back before exec.
  Standby(const sigset_t& child_mask, Watchdog* watchdog, int ready_wait_ms = kReadyWaitMs);
  ~Standby();  // stop()
  Standby(const Standby&) = delete;
  Standby& operator=(const Standby&) = delete;

  // Spawns the standby from a rank's spec (its exe, args and env; stdio,
  // fds and CPUs are the standby's own). Any running standby is stopped
  // first. Throws SpawnError.
  void start(const SpawnSpec& rank_spec);
  // The standby's pid; 0 when there is none.
  pid_t pid() const { return pid_; }
  // Whether it has said "ready" (reads what it said, waiting at most
  // wait_ms for it).
  bool ready(int wait_ms = 0);

  // Hands the standby the rank of `spec` (its argv and env, and the fds it would get:
  // stdin_fd, stdout_fd and stderr_fd at 0, 1, 2, or the launcher's own
  // where -1; every inherit_fd at its number). Returns its pid once it
  // confirmed; 0, with `why` set, when it is not adoptable or the hand-over
  // failed (a failed standby is killed and reaped). Either way it is no
  // longer this object's.
  pid_t adopt(const SpawnSpec& spec, std::string& why);

  // The launcher reaped `pid`: true when it was this standby (which then is
  // gone, and its group forgotten by the watchdog).
  bool died(pid_t pid);
  // SIGKILLs and reaps the standby, if any.
  void stop();

 private:
  void forget();

  sigset_t child_mask_;
  Watchdog* watchdog_;
  int ready_wait_ms_;
  pid_t pid_ = 0;
  int sock_ = -1;      // the launcher's end
  bool ready_ = false;
  bool ended_ = false;  // its end of the socket is closed: it is gone
  std::string exe_;
  std::vector<std::string> args_;
};

}  // namespace ddp::launcher
