// Steps, waits and stragglers (watch/step_sampler.h, straggler_scores.h):
// the heartbeat pages' marks are read every kSampleInterval; each window
// the rank that makes the others wait is named (--straggler_threshold,
// --straggler_window), and every rank's steps go into its WorkerExit for
// the summary. With --trace_file the same steps and collectives go into the
// run's trace (trace_file.h).
#include "ddp/launcher/base/host_name.h"
#include "ddp/launcher/report/trace_file.h"
#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/watch/step_sampler.h"

#include <cstdio>

namespace ddp::launcher {

namespace {

StragglerOptions straggler_options(const LaunchOptions& o) {
  StragglerOptions s;
  s.threshold = o.straggler_threshold;
  s.window_s = o.straggler_window_s;
  return s;
}

std::string straggler_instant(const StragglerVerdict& v) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "straggler (score %.2f, the others wait %.0f%%)", v.score, v.others_wait_share * 100);
  return buf;
}

class StepStats final : public Feature, public EventLoop::Source {
 public:
  explicit StepStats(AttemptControl& ctl)
      : ctl_(ctl), trace_(ctl.info().setup.trace), scores_(straggler_options(ctl.info().plan.opts)) {}

  EventLoop::Source* source() override { return this; }

  std::optional<EventLoop::Clock::time_point> deadline() override {
    if (!watching_ || drained_) return std::nullopt;
    return next_;
  }

  void due() override {
    next_ = EventLoop::Clock::now() + kSampleInterval;
    Sample s;
    sampler_.read(s);
    take(s);
    if (std::optional<StragglerVerdict> v = scores_.evaluate(monotonic_ns())) {
      if (host_.empty()) host_ = host_name();
      ctl_.log() << format_straggler_line(*v, host_) << std::endl;
      if (trace_)
        trace_->instant(straggler_instant(*v), monotonic_ns(), v->rank);
    }
  }

  void before_spawn(WorkerSlot& w) override {
    if (w.local_rank >= 0 && static_cast<size_t>(w.local_rank) >= pages_.size()) pages_.resize(static_cast<size_t>(w.local_rank) + 1);
    if (w.local_rank >= 0) pages_[static_cast<size_t>(w.local_rank)] = w.heartbeat;
  }

  void spawned(int local_rank, pid_t /*pid*/) override {
    if (local_rank < 0 || static_cast<size_t>(local_rank) >= pages_.size() || !pages_[static_cast<size_t>(local_rank)]) return;
    const int rank = ctl_.info().base_rank + local_rank;
    sampler_.watch(local_rank, rank, std::move(pages_[static_cast<size_t>(local_rank)]));
    if (trace_) trace_->rank(rank, local_rank);
    if (!watching_) next_ = EventLoop::Clock::now() + kSampleInterval;
    watching_ = true;
  }

  // Its last marks, read before the next attempt's worker reuses the slot.
  void exited(WorkerExit& w) override {
    Sample s;
    sampler_.read(w.local_rank, s);
    take(s);
  }

  void drained() override { drained_ = true; }

  void finish(AttemptResult& r) override {
    Sample s;
    sampler_.read(s);
    take(s);
    for (const RankStepStats& st : scores_.totals())
      for (WorkerExit& w : r.exits)
        if (w.rank == st.rank) w.steps = st;
  }

 private:
  void take(const Sample& s) {
    for (const StepRecord& r : s.steps) {
      scores_.add(r);
      if (trace_) trace_->step(r);
    }
    if (trace_)
      for (const RankCollective& c : s.collectives) trace_->collective(c);
  }

  AttemptControl& ctl_;
  RunTrace* trace_;
  StepSampler sampler_;
  StragglerScores scores_;
  std::vector<std::shared_ptr<const Heartbeat>> pages_;  // by local rank, until spawned
  EventLoop::Clock::time_point next_;
  bool watching_ = false, drained_ = false;
  std::string host_;
};

}  // namespace

std::unique_ptr<Feature> make_step_stats(AttemptControl& ctl) { return std::make_unique<StepStats>(ctl); }

}  // namespace ddp::launcher
