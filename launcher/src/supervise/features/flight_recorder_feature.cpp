// PyTorch's flight recorder pointed into the run (diagnose/flight_recorder.h):
// the attempt's dump prefix beside its error files (the run directory, flat,
// or the attempt's log directory), and after a failed attempt the dumps its
// workers wrote. Under a parent's prefix, what is there already is noted
// first, so that only this attempt's count.
#include "ddp/launcher/config/flight_recorder_env.h"
#include "ddp/launcher/diagnose/flight_recorder.h"
#include "ddp/launcher/supervise/features/features.h"

namespace ddp::launcher {

namespace {

class FlightRecorder final : public Feature {
 public:
  explicit FlightRecorder(AttemptControl& ctl) : ctl_(ctl) {}

  void before_spawn(WorkerSlot& w) override {
    if (!w.group.fr_dump_prefix.empty()) return;
    const AttemptInfo& info = ctl_.info();
    w.group.fr_dump_prefix = w.attempt_log_dir.empty()
                                 ? info.dir.path() + "/attempt_" + std::to_string(info.attempt) + ".nccl_trace_rank_"
                                 : w.attempt_log_dir + "/nccl_trace_rank_";
    prefix_ = flight_recorder_prefix(info.plan.parent_env, w.group.fr_dump_prefix);
    if (prefix_ != w.group.fr_dump_prefix) before_ = list_flight_recorder_files(prefix_);
  }

  void conclude(AttemptResult& r) override {
    r.fr_prefix = prefix_;
    if (!r.succeeded()) r.fr_dumps = new_dumps(before_, list_flight_recorder_files(prefix_));
  }

 private:
  AttemptControl& ctl_;
  std::string prefix_;
  std::vector<DumpFile> before_;  // files under a parent's prefix before the attempt
};

}  // namespace

std::unique_ptr<Feature> make_flight_recorder(AttemptControl& ctl) { return std::make_unique<FlightRecorder>(ctl); }

}  // namespace ddp::launcher
