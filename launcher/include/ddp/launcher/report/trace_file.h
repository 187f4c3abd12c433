#pragma once
// --trace_file: a timeline of every rank of this node in the Chrome /
// Perfetto trace-event JSON format (openable in ui.perfetto.dev and
// chrome://tracing; docs/trace.png is drawn from one). Layout:
//  - one process track per rank ("rank 3 (local_rank 1, host b)", pid
//    rank + 1) holding two threads: "steps" (a slice per training step, its
//    wait in collectives in args) and "collectives" (a slice per
//    collective: kind, bytes, sequence number). A rank's collectives run one
//    after the other on its backend, so each slice covers the time the
//    collective was running: from its start, or the previous one's end if
//    later (the rest is args.queued_ms); slices never overlap;
//  - one track for the launcher ("ddp-launch (host)") with its events as
//    instants: attempts started, worker exits, the failure, stalls, stack
//    dumps, straggler verdicts.
// Times: CLOCK_MONOTONIC (the clock of the heartbeat pages) from the
// launcher's start, in microseconds.
// Bounded: the slices of the last kTraceMaxSlices are kept (a ring: the end
// of a run, where a failure is, survives; the file's metadata counts the
// dropped ones); the launcher's instants are kept up to kTraceMaxInstants.
// Marks a rank wrote faster than the launcher read its page (the rings keep
// the last Heartbeat::kCollectiveRing collectives and kStepRing steps) were
// never slices: they are counted per rank in otherData.lost_marks and in
// the line that names the file.
// Held in memory and written once, atomically, at the run's end (a failed
// or stopped run included), by end_run. Formatting is pure, so tests check
// it without processes.

#include "ddp/launcher/watch/step_sampler.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher {

constexpr size_t kTraceMaxSlices = 500000;  // about 60 MB of JSON
constexpr size_t kTraceMaxInstants = 10000;

class RunTrace {
 public:
  // `origin_ns`: CLOCK_MONOTONIC of time 0 (the launcher's start).
  RunTrace(std::string path, std::string host, uint64_t origin_ns, size_t max_slices = kTraceMaxSlices);

  const std::string& path() const { return path_; }

  // A rank's track and its name.
  void rank(int rank, int local_rank);
  void step(const StepRecord& s);
  void collective(const RankCollective& c);
  // A launcher event at `at_ns`; on a rank's steps thread when `rank` is given.
  void instant(const std::string& name, uint64_t at_ns, std::optional<int> rank = std::nullopt);
  // A launcher event that lasts (an in-place recovery), on its events thread.
  void span(const std::string& name, uint64_t begin_ns, uint64_t end_ns);
  // Marks of a rank its page overwrote before the launcher read them.
  void lost(const RankLost& l);

  size_t slices() const { return slices_.size(); }
  uint64_t dropped() const { return dropped_; }
  size_t ranks() const { return ranks_.size(); }
  uint64_t lost_marks() const;  // steps and collectives, all ranks
  const std::map<int, RankLost>& lost_by_rank() const { return lost_; }

  std::string json() const;

 private:
  struct Slice {
    int rank;
    bool collective;
    uint64_t begin_ns, end_ns;
    uint64_t a, b, c;  // step: step, wait_ns; collective: seq, kind, bytes
    uint64_t queued_ns;
  };
  struct Instant {
    std::string name;
    uint64_t at_ns;
    std::optional<int> rank;
  };
  struct Span {
    std::string name;
    uint64_t begin_ns, end_ns;
  };
  void push(const Slice& s);

  std::string path_, host_;
  uint64_t origin_ns_;
  size_t max_slices_;
  std::deque<Slice> slices_;
  std::vector<Instant> instants_;
  std::vector<Span> spans_;
  std::map<int, int> ranks_;                // rank -> local rank
  std::map<int, uint64_t> collective_end_;  // rank -> end of its last collective slice
  uint64_t dropped_ = 0;
  std::map<int, RankLost> lost_;  // rank -> its lost marks
};

// The line that says the trace was written: ranks, slices, the dropped
// and the lost ones (per rank), ending in a newline. A trace of ranks that
// marked nothing, without --python_heartbeat, says what to add.
std::string format_trace_written(const RunTrace& trace, bool python_heartbeat = false);

}  // namespace ddp::launcher
