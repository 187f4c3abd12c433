// --event_log_handler console: START for each worker once all are started,
// as torchrun's agent records them (report/run_events.h).
#include "ddp/launcher/report/run_events.h"
#include "ddp/launcher/supervise/features/features.h"

namespace ddp::launcher {

namespace {

class StartEvents final : public Feature {
 public:
  explicit StartEvents(AttemptControl& ctl) : ctl_(ctl) {}

  void spawned(int, pid_t pid) override { pids_.push_back(pid); }

  void all_started() override {
    for (size_t lr = 0; lr < pids_.size(); ++lr)
      ctl_.log() << format_status_event(
          worker_event(ctl_.info().plan, "START", ctl_.result(), static_cast<int>(lr), pids_[lr]));
    ctl_.log() << std::flush;
  }

 private:
  AttemptControl& ctl_;
  std::vector<pid_t> pids_;  // by local rank
};

}  // namespace

std::unique_ptr<Feature> make_start_events(AttemptControl& ctl) { return std::make_unique<StartEvents>(ctl); }

}  // namespace ddp::launcher
