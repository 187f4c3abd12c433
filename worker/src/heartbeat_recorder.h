#pragma once
// CollectiveRecorder: the worker runtime's writer of this rank's progress
// heartbeat (ddp/common/heartbeat.h), the page the launcher made and named in
// DDP_HEARTBEAT_FILE (DistEnv::heartbeat_file). init_process_group attaches
// it once the group is up; ProcessGroup records every collective it issues
// (started: 1-based sequence number, kind, bytes) and AsyncWork its end
// (finished, when its wait returns or its completion callback runs), and
// training_step() the step. Internal to the runtime (not installed).
//
// Hot path: per started collective a relaxed fetch_add, a few atomic stores
// and a clock read (vDSO); per finished one a compare-exchange or two and a
// clock read; per wait two clock reads and a fetch_add; no system call, no
// lock, no allocation. A process has one heartbeat file, so the groups of one
// process given the same path share one recorder and one count (the usual
// job has one group).
//
// A heartbeat is diagnostics: when the file cannot be attached, attach()
// prints one warning line on stderr naming the path and why, and returns
// null; the run continues without heartbeats.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ddp/common/heartbeat.h"

namespace ddp::worker {

class CollectiveRecorder {
 public:
  // The process's recorder for `path`, attached on first use and kept until
  // the process ends (a later group finds it again). `rank` names the rank
  // in the warning. Null when the file cannot be attached, or when a live
  // group of this process records into a different file (also a warning).
  static std::shared_ptr<CollectiveRecorder> attach(const std::string& path, int rank);
  // The program has finished (run_main's body returned): the page's exiting
  // mark, so a signal during the process's exit is named as such by the
  // launcher. Nothing when no page was attached.
  static void mark_exiting();

  explicit CollectiveRecorder(std::unique_ptr<Heartbeat> hb) : hb_(std::move(hb)) {}

  // Enters the next collective; returns its sequence number.
  uint64_t started(CollectiveKind kind, uint64_t bytes) {
    const uint64_t seq = next_.fetch_add(1, std::memory_order_relaxed) + 1;
    hb_->collective_started(seq, kind, bytes);
    return seq;
  }
  // Collective `seq` finished; the record never moves back, so waits in any
  // order (DDP waits for its status exchange before the buckets issued
  // earlier) and a completion seen twice (callback, then wait) are fine.
  void finished(uint64_t seq) { hb_->collective_finished_at_least(seq); }
  void step(uint64_t step) { hb_->set_step(step); }
  // A thread was blocked `ns` waiting for a collective (AsyncWork::wait):
  // the launcher's wait share and straggler scores (step_sampler.h).
  void waited(uint64_t ns) { hb_->add_wait_ns(ns); }

  const std::string& path() const { return hb_->path(); }
  // The page itself, for in-place recovery's fields (recovery.h).
  Heartbeat& page() { return *hb_; }

 private:
  static std::mutex& process_mutex();
  static std::shared_ptr<CollectiveRecorder>& process_recorder();

  std::unique_ptr<Heartbeat> hb_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace ddp::worker
