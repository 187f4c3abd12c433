#pragma once
// The learning-rate schedule of the loop (trainer.h), one interface with two
// implementations: ReduceLROnPlateau on the task's monitored metric (the
// seeds' rule and the default; plateau_scheduler.h computes it) and linear
// warm-up followed by cosine decay, the usual language-model schedule
// (--lr_schedule cosine, --warmup_steps N). A task picks another through
// TrainingTask::make_schedule (training_task.h). The loop asks a schedule
// for the rate before every optimizer step and after every epoch's
// evaluation, and applies it to every parameter group; the schedule never
// touches the optimizer. Its whole state goes into the run's TrainState, so
// a resumed run continues the same curve. Torch-free (ddp::loop_core).

#include <cstdint>
#include <memory>
#include <string>

#include "ddp/loop/train_state.h"

namespace ddp::loop {

struct TrainOptions;

// What a schedule may depend on, fixed for the run.
struct ScheduleContext {
  const TrainOptions& options;
  std::int64_t steps_per_epoch = 0;  // optimizer steps in a full epoch
  std::int64_t total_steps = 0;      // optimizer steps of the whole run (all epochs, or --total_steps)
  std::string monitor;               // the task's monitored metric (TrainingTask::monitor())
  bool higher_is_better = true;
};

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // "plateau", "cosine": in the start line and the checkpoint.
  virtual std::string name() const = 0;
  // Before the optimizer step `global_step` (0 = the run's first), the rate
  // for it, from the current one. Default: unchanged.
  virtual double at_step(std::int64_t global_step, double lr) {
    (void)global_step;
    return lr;
  }
  // After each epoch's evaluation, with its monitored metric: the rate from
  // then on. When it changes the rate, `note` gets a line for the log.
  // Default: unchanged.
  virtual double at_epoch_end(double metric, double lr, std::string& note) {
    (void)metric;
    (void)note;
    return lr;
  }
  // Its state into the TrainState a checkpoint carries, and back on resume.
  virtual void save(TrainState& s) const = 0;
  virtual void load(const TrainState& s) = 0;
};

// ReduceLROnPlateau (--lr_factor, --lr_patience) on ctx.monitor; its state
// is TrainState::plateau (the checkpoint keys it always had).
std::unique_ptr<LrSchedule> make_plateau_schedule(const ScheduleContext& ctx);
// Linear warm-up from 0 over `warmup_steps` steps, then cosine decay to 0
// at ctx.total_steps, as Hugging Face's get_cosine_schedule_with_warmup (and
// torchtune's): step s runs at lr * s / warmup, then at
// lr * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2. The peak (the
// --learning_rate of the run's first start) is its state.
std::unique_ptr<LrSchedule> make_cosine_schedule(const ScheduleContext& ctx, double peak_lr);
// The one --lr_schedule names.
std::unique_ptr<LrSchedule> make_schedule_from_options(const ScheduleContext& ctx);

}  // namespace ddp::loop
