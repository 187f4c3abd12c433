// --trace_file: the launcher's own events on the run's timeline
// (report/trace_file.h) as instants: each attempt's start, every worker's
// exit (on its rank's track), the attempt's failure (a stall named as such)
// and every stack dump. The ranks' steps and collectives come from the
// step statistics (step_stats.cpp).
#include "ddp/launcher/report/trace_file.h"
#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/supervise/run_services.h"

namespace ddp::launcher {

namespace {

class TraceEvents final : public Feature {
 public:
  explicit TraceEvents(AttemptControl& ctl) : ctl_(ctl), trace_(*(ctl.info().services.trace ? &*ctl.info().services.trace : nullptr)) {}

  void all_started() override {
    const int n = ctl_.info().attempt;
    trace_.instant("attempt " + std::to_string(n) + " started" +
                       (ctl_.info().placement.restart_count > 0
                            ? " (restart " + std::to_string(ctl_.info().placement.restart_count) + ")"
                            : ""),
                   monotonic_ns());
  }

  void exited(WorkerExit& w) override {
    if (w.pid <= 0) return;
    trace_.instant("exited: " + w.status_text(), monotonic_ns(), w.rank);
  }

  void failed(const WorkerExit& cause) override {
    trace_.instant((cause.stalled.empty() ? "failure: rank " : "stall: rank ") + std::to_string(cause.rank) +
                       (cause.stalled.empty() ? " " + cause.status_text() : " made no progress"),
                   monotonic_ns());
  }

  void stacks_dumped(const std::string& why) override { trace_.instant("stacks dumped (" + why + ")", monotonic_ns()); }

 private:
  AttemptControl& ctl_;
  RunTrace& trace_;
};

}  // namespace

std::unique_ptr<Feature> make_trace_events(AttemptControl& ctl) { return std::make_unique<TraceEvents>(ctl); }

}  // namespace ddp::launcher
