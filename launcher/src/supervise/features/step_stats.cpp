// Steps, waits and stragglers (watch/step_sampler.h, straggler_scores.h):
// the heartbeat pages' marks are read every kSampleInterval; each window
// the rank that makes the others wait is named (--straggler_threshold,
// --straggler_window), and every rank's steps go into its WorkerExit for
// the summary. With --trace_file the same steps and collectives go into the
// run's trace (trace_file.h).
#include "ddp/common/json_writer.h"
#include "ddp/launcher/base/host_name.h"
#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/report/run_events.h"
#include "ddp/launcher/report/trace_file.h"
#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/supervise/run_services.h"
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
  char buf[128];
  std::snprintf(buf, sizeof(buf), "straggler: rank %d (score %.2f, the others wait %.0f%%)", v.rank, v.score,
                v.others_wait_share * 100);
  return buf;
}

// The STRAGGLER event's numbers (event_log.h): members of its JSON line.
std::string straggler_metadata(const StragglerVerdict& v) {
  json::Writer m = json::Writer::members();
  m.key("straggler").object();
  m.key("score").number(fixed_text(v.score, 3)).key("individual_score").number(fixed_text(v.individual_score, 3));
  m.key("work_ms").number(fixed_text(v.work_ms, 3)).key("fastest_ms").number(fixed_text(v.fastest_ms, 3));
  m.key("others_wait_share").number(fixed_text(v.others_wait_share, 4)).key("ranks").integer(v.ranks).end();
  return m.text();
}

class StepStats final : public Feature, public EventLoop::Source {
 public:
  explicit StepStats(AttemptControl& ctl)
      : ctl_(ctl),
        trace_(ctl.info().services.trace ? &*ctl.info().services.trace : nullptr),
        job_(ctl.info().services.job_windows ? &*ctl.info().services.job_windows : nullptr),
        scores_(straggler_options(ctl.info().plan.opts)) {}

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
    const uint64_t now = monotonic_ns();
    if (!scores_.window_due(now)) return;
    const std::vector<WindowRank> none;
    const std::vector<WindowRank>& others = job_ ? job_->others() : none;
    const std::optional<StragglerVerdict> v = scores_.evaluate(now, others, may_name(others));
    if (host_.empty()) host_ = host_name();
    // c10d: this node's window to the others; their answer is compared at
    // the next window.
    if (job_) job_->publish(host_, scores_.local_window());
    if (v) {
      ctl_.log() << format_straggler_line(*v, host_) << std::endl;
      if (ctl_.info().plan.opts.event_log_handler == EventLogHandler::Console && v->host.empty()) {
        StatusEvent e = worker_event(ctl_.info().plan, "STRAGGLER", ctl_.result(), v->local_rank,
                                     ctl_.worker_pid(v->local_rank));
        e.more_metadata = straggler_metadata(*v);
        ctl_.log() << format_status_event(e) << std::flush;
      }
      if (trace_)
        trace_->instant(straggler_instant(*v), monotonic_ns(),
                        v->host.empty() ? std::optional<int>(v->rank) : std::nullopt);
    }
  }

  void spawned(int local_rank, pid_t /*pid*/) override {
    std::shared_ptr<const Heartbeat> page = ctl_.pages().page(local_rank);
    if (!page) return;
    const int rank = ctl_.info().base_rank + local_rank;
    sampler_.watch(local_rank, rank, std::move(page));
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
  // A node of a multi-node c10d job names a straggler only once it has
  // heard another node's window (the job's slowest rank may be there), or
  // after kAloneWindows windows without (the others mark no steps).
  bool may_name(const std::vector<WindowRank>& others) {
    const AttemptInfo& info = ctl_.info();
    if (!job_ || ctl_.result().world_size <= info.plan.nproc) return true;
    for (const WindowRank& w : others)
      if (w.rank < info.base_rank || w.rank >= info.base_rank + info.plan.nproc) return true;
    return ++alone_windows_ > kAloneWindows;
  }

  void take(const Sample& s) {
    for (const StepRecord& r : s.steps) {
      scores_.add(r);
      if (trace_) trace_->step(r);
    }
    if (!trace_) return;
    for (const RankCollective& c : s.collectives) trace_->collective(c);
    for (const RankLost& l : s.lost) trace_->lost(l);
  }

  AttemptControl& ctl_;
  RunTrace* trace_;
  JobWindows* job_;  // c10d: the nodes' windows; null for static rendezvous
  StepSampler sampler_;
  StragglerScores scores_;
  EventLoop::Clock::time_point next_;
  bool watching_ = false, drained_ = false;
  static constexpr int kAloneWindows = 3;
  int alone_windows_ = 0;
  std::string host_;
};

}  // namespace

std::unique_ptr<Feature> make_step_stats(AttemptControl& ctl) { return std::make_unique<StepStats>(ctl); }

}  // namespace ddp::launcher
