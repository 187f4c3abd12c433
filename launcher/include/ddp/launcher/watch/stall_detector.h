#pragma once
// --stall_timeout: which rank makes no progress, and who is to blame. Pure:
// no processes, no files, no clock of its own (the caller passes `now`), so
// tests drive it with made-up samples and times. ProgressWatch
// (progress_watch.h) feeds it what it reads from the heartbeat pages and
// /proc; the supervisor acts on the verdict.
//
// What counts as progress (docs/errors.md, "A stalled job"):
//  - a rank whose heartbeat page the worker runtime writes, once it has
//    entered its first collective or step: any change of the page
//    (collective_started, collective_finished or step). A rank waiting in a
//    collective does not advance either: the job is stalled as soon as one
//    rank has not advanced for the timeout;
//  - any other rank (no heartbeat: plain Python, a shell; or a runtime
//    worker still starting up): CPU time of its process group (the worker
//    and every process in its group, e.g. DataLoader workers) growing by
//    at least kMinCpuShare of the wall time between two looks, or a line of
//    output that the launcher sees (note_output). Such ranks are stalled
//    together: when none of them has advanced for the timeout (a rank that
//    waits for a peer uses no CPU either, so one idle rank alone proves
//    nothing).
// The straggler (the root cause; never a rank that only waits):
//  - among heartbeat ranks: a rank that has not entered the collective the
//    others entered last (the one furthest behind), else the rank whose
//    heartbeat stopped first;
//  - among the others: a rank whose main thread is not blocked in a futex
//    (where a Gloo/NCCL wait sleeps) when some are, else the rank whose
//    progress stopped first. Weaker than a heartbeat: a rank stuck on a lock
//    looks like a waiter;
//  - before all of these: a rank that is stopped (state T or t: SIGSTOP,
//    SIGTSTP, a debugger), else one in uninterruptible sleep (D), is the
//    straggler: it cannot advance, whatever the others wait for;
//  - ties: the lowest rank.

#include "ddp/common/heartbeat.h"
#include "ddp/launcher/config/options.h"

#include <chrono>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

// CPU growth below this share of the wall time between two looks is noise
// (timer ticks of an idle process), not progress.
constexpr double kMinCpuShare = 0.02;

// kMinStallTimeoutS, the shortest --stall_timeout: config/options.h.

// One rank as the detector sees it.
struct RankProgress {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  // Watched by its heartbeat: attached and past its first collective or step.
  bool heartbeat = false;
  HeartbeatSnapshot snapshot;  // the last one read (pid 0: never attached)
  double cpu_s = 0;            // its process group's CPU time at the last look
  double cpu_base_s = 0;       // ... at its last progress
  std::chrono::steady_clock::time_point last_progress;
  // For ranks without a heartbeat, filled at the verdict: whether the main
  // thread is blocked in a futex (nullopt: unknown).
  std::optional<bool> in_futex;
  // Filled at the verdict: the worker's state letter in /proc/<pid>/stat
  // ('T' stopped, 't' traced, 'D' uninterruptible, ...; 0 unknown).
  char state = 0;
};

struct StallVerdict {
  RankProgress straggler;
  double idle_s = 0;  // how long the straggler has not advanced
  // "rank 1 (local_rank 1, pid N) stalled: no progress for 5.0 s; rank 1
  // last finished collective #1041; ranks 0,2,3 wait in #1042 (allreduce,
  // 1.6 MiB)"
  std::string message;
};

class StallDetector {
 public:
  using Clock = std::chrono::steady_clock;

  // timeout_s > 0 (the option asks for at least kMinStallTimeoutS; tests drive less with a fake clock).
  explicit StallDetector(double timeout_s);

  double timeout_s() const { return timeout_s_; }
  // How often the caller should look: min(1 s, timeout / 4).
  Clock::duration interval() const;

  // A worker was started (its start counts as progress).
  void add(int local_rank, int rank, pid_t pid, Clock::time_point now);
  // It exited: it can stall nothing any more.
  void remove(int local_rank);
  // One look at a rank: its heartbeat page (nullopt: none) and its process
  // group's CPU time.
  void observe(int local_rank, const std::optional<HeartbeatSnapshot>& hb, double cpu_s, Clock::time_point now);
  // The launcher saw output of this rank.
  void note_output(int local_rank, Clock::time_point now);

  // Whether the job is stalled at `now` (see the rules above).
  bool stalled(Clock::time_point now) const;
  // When it would be stalled if nothing advances (max() when no rank is watched).
  Clock::time_point deadline() const;

  // The ranks alive, by local rank (the caller fills in_futex for decide()).
  std::vector<RankProgress> ranks() const;

 private:
  RankProgress* find(int local_rank);

  double timeout_s_;
  std::vector<std::optional<RankProgress>> slots_;  // by local rank: every look is O(ranks)
};

// The straggler among `ranks` (the alive ones at a stall, as stalled() saw
// them with `timeout_s`) and the message. Pure; the rules are in the
// header's contract. `ranks` must not be empty. whole_job_here: every rank
// of the job runs on this node (the message then never points elsewhere).
StallVerdict decide_stall(const std::vector<RankProgress>& ranks, std::chrono::steady_clock::time_point now,
                          double timeout_s, bool whole_job_here = false);

// Where the heartbeat ranks are: "rank 1 last finished collective #1041;
// ranks 0,2,3 wait in #1042 (allreduce, 1.6 MiB)"; "" when no rank has a
// heartbeat. Also for the stack summary of a stall or a dump.
std::string collective_summary(const std::vector<RankProgress>& ranks);

}  // namespace ddp::launcher
