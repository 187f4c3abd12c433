#pragma once
// The workers' progress as one attempt's supervisor sees it: reads the
// attempt's heartbeat pages (process/heartbeat_pages.h, made and owned by
// the attempt) and, with --stall_timeout, looks at them and at the CPU time
// of each worker's process group (/proc/<pid>/stat of every process in it) every
// StallDetector::interval(), feeding a StallDetector. The supervisor calls it
// from its one poll loop: ms_to_check() bounds the poll's timeout, check()
// looks when due. No thread, no timer of its own, no sleeping.
// Without --stall_timeout it reads nothing (but collective_summary()).
// note_output() is the entry point for output the launcher sees (a tee'd
// line): it counts as that rank's progress.

#include "ddp/common/heartbeat.h"
#include "ddp/launcher/process/heartbeat_pages.h"
#include "ddp/launcher/watch/stall_detector.h"

#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

class ProgressWatch {
 public:
  // stall_timeout_s 0: never a verdict. whole_job_here: every rank of the
  // job is this launcher's (decide_stall). `pages` outlives it.
  ProgressWatch(double stall_timeout_s, const HeartbeatPages& pages, bool whole_job_here = false);

  bool watching() const { return detector_.has_value(); }

  // The worker of this local rank runs as `pid` (its own process group).
  void started(int local_rank, int rank, pid_t pid);
  // It exited (reaped).
  void exited(int local_rank);
  // The launcher saw output of this local rank.
  void note_output(int local_rank);

  // Milliseconds until the next look; -1 without --stall_timeout.
  int ms_to_check() const;
  // Looks when due; the verdict once the job is stalled (then never again).
  std::optional<StallVerdict> check();

  // collective_summary() (stall_detector.h) of the pages now, with or
  // without --stall_timeout: for the stack summary of a stall or a dump.
  std::string collective_summary() const;

 private:
  void look(StallDetector::Clock::time_point now);

  std::optional<StallDetector> detector_;
  const HeartbeatPages& pages_;
  std::vector<int> ranks_;  // by local rank: its global rank (started())
  StallDetector::Clock::time_point next_look_;
  bool decided_ = false;
  bool whole_job_here_ = false;
};

// CPU time (user + system, reaped children included) of every process whose
// process group is in `pgids`, by group, from one scan of /proc. Groups with
// no process left are absent.
std::vector<std::pair<pid_t, double>> process_group_cpu_seconds(const std::vector<pid_t>& pgids);

// Whether the main thread of `pid` is blocked in futex() (/proc/<pid>/syscall);
// nullopt when that cannot be read.
std::optional<bool> blocked_in_futex(pid_t pid);

// The state letter of /proc/<pid>/stat ('R', 'S', 'D', 'T', 't', ...); 0
// when it cannot be read.
char process_state(pid_t pid);

}  // namespace ddp::launcher
