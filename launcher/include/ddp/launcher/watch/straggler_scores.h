#pragma once
// Which rank makes a healthy job slow, from the steps every rank's
// heartbeat page marks (step_sampler.h). In synchronous data parallelism
// every rank's step takes as long as the slowest one's: what tells the
// straggler apart is its own work in the step, the step less the time the
// rank was blocked waiting for collectives. The scores are the two of
// NVIDIA's nvidia-resiliency-ext straggler detection, computed from the
// median work a step (its default statistic):
//  - relative: the fastest rank's median / this rank's (1: as fast as the
//    fastest; 0.5: twice as slow), over a window of the last `window_s`;
//  - individual: this rank's best window median / its current one.
// Every window (evaluate(), called as time passes), the rank with the lowest
// relative score below `threshold` is the straggler; the waiting of the
// other ranks (their median share of each step spent blocked) is its cost.
// The same rank is named again only after `repeat_s`. Pure: no clock, no
// I/O; tests feed it made-up steps.

#include <cstdint>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher {

// One finished step of one rank: from its start mark to the next one.
struct StepRecord {
  int rank = 0;
  int local_rank = 0;
  uint64_t step = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t wait_ns = 0;  // blocked waiting for collectives within it

  double seconds() const { return end_ns > start_ns ? static_cast<double>(end_ns - start_ns) * 1e-9 : 0.0; }
  double work_seconds() const {
    const double w = seconds() - static_cast<double>(wait_ns) * 1e-9;
    return w > 0 ? w : 0.0;
  }
};

// One rank's steps over the whole attempt (the run summary).
struct RankStepStats {
  int rank = 0;
  int local_rank = 0;
  uint64_t steps = 0;
  double steps_per_s = 0;
  double step_ms_median = 0, step_ms_p90 = 0;  // wall time a step
  double work_ms_median = 0;                   // its own work a step (the step less its waits)
  double wait_share = 0;                       // median share of a step spent blocked in collectives
  double relative_score = 1;                   // fastest median work / its own, whole attempt, this node's ranks
  double individual_score = 1;                 // its best window / its last window
};

struct StragglerVerdict {
  int rank = 0;
  int local_rank = 0;
  std::string host;             // another node's rank: its host; "" for this node's
  double work_ms = 0;           // its median work a step in the window
  double fastest_ms = 0;        // the fastest rank's
  double score = 1;             // relative score
  double individual_score = 1;
  double others_wait_share = 0; // the other ranks' median share of a step spent waiting (medians of their steps)
  int ranks = 0;                // ranks compared
};

struct StragglerOptions {
  double window_s = 30;   // --straggler_window
  double threshold = 0.8; // --straggler_threshold; 0: never a verdict
  int min_steps = 5;      // steps a rank needs in a window to be compared
  double repeat_s = 300;  // the same rank is named again only this much later
};

// One rank's last window as the nodes of a c10d job share it (through the
// rendezvous store: ddp-rdzv's `steps` line), so that every node compares
// the ranks of the whole job.
struct WindowRank {
  int rank = 0;
  int local_rank = 0;
  std::string host;
  double work_ms = 0;     // median own work a step
  double wait_share = 0;  // median share of a step spent waiting
  int steps = 0;
};

// "host;rank:local_rank:work_ms:wait_share:steps,..." (the host's ';', '|',
// ',', spaces and control bytes replaced by '_').
std::string format_node_window(const std::string& host, const std::vector<WindowRank>& ranks);
// Every node's window, '|' between nodes; a part that does not parse is
// left out (a node of another version), and so is a rank outside
// 0..world_size-1 (a forged window: the store is anyone's who can reach
// it). Hosts are cleaned as format_node_window's.
std::vector<WindowRank> parse_job_windows(const std::string& text, int world_size);

class StragglerScores {
 public:
  explicit StragglerScores(StragglerOptions o);

  void add(const StepRecord& s);
  // At most once a window: its scores, and the straggler to name now (none
  // when every rank is above the threshold, or it was named recently).
  // `others`: the last windows of the other nodes' ranks (a rank of this
  // node among them is left out: its own steps are newer). may_name false:
  // the window's scores only (a node of a multi-node job that has not yet
  // heard the others must not name its own slowest rank as the job's).
  std::optional<StragglerVerdict> evaluate(uint64_t now_ns, const std::vector<WindowRank>& others = {},
                                           bool may_name = true);
  // This node's ranks in the window evaluate() last closed (host left "").
  const std::vector<WindowRank>& local_window() const { return local_; }
  // Whether evaluate(now_ns) would close a window.
  bool window_due(uint64_t now_ns) const {
    return window_start_ns_ != 0 && now_ns >= window_start_ns_ + static_cast<uint64_t>(opts_.window_s * 1e9);
  }
  // How many windows evaluate() has closed.
  uint64_t windows() const { return windows_; }
  // The last window's verdict candidate, named or not (tests, the summary).
  const std::optional<StragglerVerdict>& last_window() const { return last_; }
  // Every rank's steps over the attempt, by rank.
  std::vector<RankStepStats> totals() const;

 private:
  struct Rank {
    int rank = 0;
    int local_rank = 0;
    std::vector<double> step_s, work_s, wait_share;  // every step, thinned to every 2nd when long
    uint64_t thin = 1, seen = 0;                     // keep every thin-th step
    uint64_t steps = 0;
    uint64_t first_ns = 0, last_ns = 0;
    std::vector<StepRecord> window;
    std::optional<double> best_window_ms, last_window_ms;
  };

  StragglerOptions opts_;
  std::map<int, Rank> ranks_;
  uint64_t window_start_ns_ = 0;
  std::optional<StragglerVerdict> last_;
  std::vector<WindowRank> local_;
  uint64_t windows_ = 0;
  std::map<int, uint64_t> named_at_ns_;
};

// "ddp-launch: rank 3 (host b, local_rank 1) is a straggler: 412 ms of its
// own work a step against 315 ms on the fastest of 4 ranks (score 0.76); the
// other ranks wait 23% of each step for it"
std::string format_straggler_line(const StragglerVerdict& v, const std::string& host);

// The median and the p-th quantile (nearest rank) of `v` (0 when empty).
double median_of(std::vector<double> v);
double quantile_of(std::vector<double> v, double p);

}  // namespace ddp::launcher
