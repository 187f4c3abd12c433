#include "ddp/launcher/supervise/features/features.h"

#include "ddp/common/heartbeat.h"
#include "ddp/launcher/base/number_text.h"

#include <utility>

namespace ddp::launcher {

namespace {

// A worker that dies of a signal the launcher did not send, after its
// heartbeat page says its program had finished (the C++ runtime's run_main
// returned; the Python module's exit mark once the script ended): it died
// in its exit, in some library's teardown. torch 2.x with Gloo does that to
// Python ranks now and then (a Gloo thread frees a tensor that needs the GIL
// while the interpreter finalizes: std::terminate, SIGABRT). A non-zero exit
// code after the mark is the program's own choice (sys.exit(3)), not this.
class ExitVerdict final : public Feature {
 public:
  explicit ExitVerdict(AttemptControl& ctl) : ctl_(ctl) {}
  void exited(WorkerExit& w) override {
    if (!w.signaled || ctl_.killed() || w.after_teardown) return;
    const std::shared_ptr<const Heartbeat> page = ctl_.pages().page(w.local_rank);
    if (!page) return;
    const HeartbeatSnapshot s = page->read();
    if (s.exiting_ns == 0 || s.pid != static_cast<uint64_t>(w.pid)) return;
    const uint64_t now = monotonic_ns();
    const double exiting_s = now > s.exiting_ns ? static_cast<double>(now - s.exiting_ns) / 1e9 : 0.0;
    Verdict v;
    v.feature = "exit_verdict";
    v.label = "in exit";
    v.text = "its program had finished " + fixed_text(exiting_s * 1000, 0) +
             " ms before: it died in its exit, in a library's teardown (a Python rank on torch 2.x with Gloo: call "
             "torch.distributed.destroy_process_group() before the script ends)";
    v.restart_note = "in its exit after its program had finished";
    v.status = "in exit";
    w.verdicts.push_back(std::move(v));
  }

 private:
  AttemptControl& ctl_;
};

}  // namespace

std::unique_ptr<Feature> make_exit_verdict(AttemptControl& ctl) { return std::make_unique<ExitVerdict>(ctl); }

}  // namespace ddp::launcher
