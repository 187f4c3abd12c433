#pragma once
// The workers' progress as one attempt's supervisor sees it: owns the
// heartbeat page of every worker (a sealed memfd made before the worker
// starts, inherited by it as an fd that DDP_HEARTBEAT_FILE names) and, with
// --stall_timeout, looks at them and at the CPU time of each worker's
// process group (/proc/<pid>/stat of every process in it) every
// StallDetector::interval(), feeding a StallDetector. The supervisor calls it
// from its one poll loop: ms_to_check() bounds the poll's timeout, check()
// looks when due. No thread, no timer of its own, no sleeping.
// Without --stall_timeout it only makes the pages (one memfd_create,
// ftruncate, seal and mmap per worker) and reads nothing.
// note_output() is the entry point for output the launcher sees (a tee'd
// line): it counts as that rank's progress.

#include "ddp/common/heartbeat.h"
#include "ddp/launcher/watch/stall_detector.h"

#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

class ProgressWatch {
 public:
  // stall_timeout_s 0: pages only, never a verdict. whole_job_here: every
  // rank of the job is this launcher's (decide_stall).
  explicit ProgressWatch(double stall_timeout_s, bool whole_job_here = false);

  bool watching() const { return detector_.has_value(); }

  // Makes the page for this local rank: a sealed memfd (heartbeat.h) no
  // process can truncate. Returns its fd, to be inherited by that worker
  // alone (DDP_HEARTBEAT_FILE=Heartbeat::fd_path(fd)), or -1 when it could
  // not be made (the worker then runs without one; the reason is in
  // take_warning(), said once per attempt).
  int create_heartbeat(int local_rank);
  // The worker of this local rank runs as `pid` (its own process group);
  // the launcher's copy of its page's fd is closed.
  void started(int local_rank, int rank, pid_t pid);
  // It exited (reaped).
  void exited(int local_rank);
  // The launcher saw output of this local rank.
  void note_output(int local_rank);

  // Milliseconds until the next look; -1 without --stall_timeout.
  int ms_to_check() const;
  // Looks when due; the verdict once the job is stalled (then never again).
  std::optional<StallVerdict> check();

  // The heartbeat of a local rank (nullopt: none, or never attached).
  std::optional<HeartbeatSnapshot> heartbeat(int local_rank) const;
  // The page of this local rank, to be read by others too (step_sampler.h);
  // null when none was made.
  std::shared_ptr<const Heartbeat> shared_page(int local_rank) const;
  // collective_summary() (stall_detector.h) of the pages now, with or
  // without --stall_timeout: for the stack summary of a stall or a dump.
  std::string collective_summary() const;

  std::string take_warning();

 private:
  const Heartbeat* page(int local_rank) const;
  void look(StallDetector::Clock::time_point now);

  std::optional<StallDetector> detector_;
  std::vector<std::shared_ptr<Heartbeat>> pages_;  // by local rank; null: none
  std::vector<int> ranks_;                         // by local rank: its global rank (started())
  StallDetector::Clock::time_point next_look_;
  bool decided_ = false;
  std::string warning_;
  bool warned_ = false;
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
