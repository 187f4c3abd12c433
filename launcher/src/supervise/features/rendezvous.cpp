// c10d (elastic/rdzv_agent.h): the rendezvous helper in the attempt's loop.
// This node's first failure is told to the rendezvous at once, so the other
// nodes stop their workers; a reason from it (another node failed, left, or
// waits to join; the job was ended) stops this node's healthy workers. A
// local failure seen first stays the root cause; the reason is kept either
// way, and the rounds (elastic_run.h) decide what follows. Every node's
// last window of steps, as the helper shares them, goes to the run's
// JobWindows (job_windows.h), which the step statistics read.
#include "ddp/launcher/elastic/agent_source.h"
#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/supervise/run_services.h"

namespace ddp::launcher {

namespace {

class Rendezvous final : public Feature, public AgentSource {
 public:
  explicit Rendezvous(AttemptControl& ctl) : AgentSource(*ctl.info().services.agent), ctl_(ctl) {}

  EventLoop::Source* source() override { return this; }

  void failed(const WorkerExit& w) override {
    if (told_ || !stop_.empty()) return;
    told_ = true;
    agent_.send(rdzv::lines::Command::Fail, "rank " + std::to_string(w.rank) + " (local_rank " + std::to_string(w.local_rank) +
                (w.pid > 0 ? ", pid " + std::to_string(w.pid) : "") + ") on " + ctl_.info().placement.node +
                " failed: " + w.reason_text());
  }

  void finish(AttemptResult& r) override {
    r.rdzv_told_failure = told_;
    if (stop_.empty()) return;
    r.rdzv_stop = stop_;
    r.rdzv_counted = counted_;
    r.rdzv_abort = abort_;
  }

 private:
  void on_event(const RdzvEvent& e) override {
    if (e.kind == RdzvEvent::JobSteps) {  // for the step statistics' next window
      if (ctl_.info().services.job_windows) ctl_.info().services.job_windows->heard(e.text);
      return;
    }
    // In-place recovery across the nodes: the recovery feature's.
    if (auto& recovery = ctl_.info().services.job_recovery; recovery && recovery->heard(e)) return;
    if (e.kind != RdzvEvent::Restart && e.kind != RdzvEvent::Abort && e.kind != RdzvEvent::Error) return;
    if (!stop_.empty()) return;
    stop_ = e.text;
    counted_ = e.kind != RdzvEvent::Restart || e.counted;
    abort_ = e.kind != RdzvEvent::Restart;
    ctl_.stop(e.text);
  }

  AttemptControl& ctl_;
  bool told_ = false;
  std::string stop_;  // the first reason to stop
  bool counted_ = true;
  bool abort_ = false;
};

}  // namespace

std::unique_ptr<Feature> make_rendezvous(AttemptControl& ctl) { return std::make_unique<Rendezvous>(ctl); }

}  // namespace ddp::launcher
