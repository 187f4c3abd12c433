#include "ddp/launcher/diagnose/oom_kill.h"
#include "ddp/launcher/supervise/features/features.h"

#include <csignal>

namespace ddp::launcher {

namespace {

// A SIGKILL the launcher did not send, checked against the memory cgroup's
// OOM kill counter as it was before the workers started (diagnose/oom_kill.h).
class OomVerdict final : public Feature {
 public:
  explicit OomVerdict(AttemptControl& ctl) : ctl_(ctl) {}
  void exited(WorkerExit& w) override {
    if (w.signaled && w.code == SIGKILL && !ctl_.killed()) w.oom = oom_.explain_sigkill(w.pid, w.max_rss_kb);
  }

 private:
  AttemptControl& ctl_;
  OomWatch oom_;
};

}  // namespace

std::unique_ptr<Feature> make_oom_verdict(AttemptControl& ctl) { return std::make_unique<OomVerdict>(ctl); }

}  // namespace ddp::launcher
