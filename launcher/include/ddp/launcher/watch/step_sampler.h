#pragma once
// Reads the timed marks of every worker's heartbeat page (heartbeat.h: the
// step ring and the collective ring) at the launcher's cadence and turns
// them into finished steps (StepRecord: from one step mark to the next, with
// the time the rank waited in between) and finished collectives. The ranks
// pay nothing for it beyond their atomic stores: the launcher reads its own
// mapping of their pages. A page holds the last Heartbeat::kStepRing steps
// and kCollectiveRing collectives; what a rank wrote faster than the
// launcher read is counted as lost, never guessed. Who calls it: the
// step-statistics feature (supervise/features/step_stats.cpp), every
// kSampleInterval and once more when a worker exits.

#include "ddp/common/heartbeat.h"
#include "ddp/launcher/watch/straggler_scores.h"

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace ddp::launcher {

constexpr std::chrono::milliseconds kSampleInterval{100};

struct RankCollective {
  int rank = 0;
  int local_rank = 0;
  CollectiveMark mark;
};

// Marks of one rank that its page's rings overwrote before a read: a rank
// that marks faster than kSampleInterval allows (small collectives in a
// loop) loses all but the last kCollectiveRing of each interval.
struct RankLost {
  int rank = 0;
  uint64_t steps = 0, collectives = 0;
};

struct Sample {
  std::vector<StepRecord> steps;
  std::vector<RankCollective> collectives;
  std::vector<RankLost> lost;  // only ranks that lost marks in this read
};

class StepSampler {
 public:
  // The page of this local rank (shared with the progress watch that made
  // it); its worker's global rank.
  void watch(int local_rank, int rank, std::shared_ptr<const Heartbeat> page);
  // The new finished steps and collectives of every page since the last
  // read, appended to `out`.
  void read(Sample& out);
  // The same for one local rank (it exited: its last marks).
  void read(int local_rank, Sample& out);

  uint64_t lost_steps() const { return lost_steps_; }
  uint64_t lost_collectives() const { return lost_collectives_; }

 private:
  struct Page {
    int rank = -1;
    std::shared_ptr<const Heartbeat> page;
    uint64_t next_step = 0, next_seq = 1;
    std::optional<StepMark> open;  // the last step mark, whose end is the next one
  };
  void read_page(int local_rank, Page& p, Sample& out);

  std::vector<Page> pages_;  // by local rank
  std::vector<StepMark> marks_;         // read buffers, reused
  std::vector<CollectiveMark> done_;
  uint64_t lost_steps_ = 0, lost_collectives_ = 0;
};

}  // namespace ddp::launcher
