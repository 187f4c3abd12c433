#pragma once
// The training steps of one epoch (trainer.h): per step the heartbeat's step,
// the hooks, the schedule's rate, the gradients zeroed in place, DDP's
// prepare_forward, the task's forward and loss (on the whole batch, on two
// halves at once: batch_halves.h, or on several batches accumulated), the
// non-finite-loss stop (every rank together), backward (DDP averages the
// gradients), clipping and the optimizer's step, then the progress line and
// the step's end hook; after each step but the epoch's last, the step
// checkpoint's hook. A
// resumed epoch starts at its first step not run. Internal to the loop
// library.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddp/loop/callbacks.h"
#include "ddp/loop/lr_schedule.h"
#include "ddp/loop/progress.h"
#include "ddp/loop/train_state.h"
#include "ddp/loop/trainer.h"

namespace torch::optim {
class Optimizer;
}
namespace ddp::worker {
class DistributedDataParallel;
class ProcessGroup;
}  // namespace ddp::worker

namespace ddp::loop {

class BatchHalves;

class InPlaceRecovery;

struct EpochSteps {
  // Of the steps' mean losses, this rank's, plus its share (1 / world) of
  // the sum over ranks of the steps a resume skipped.
  double loss_sum = 0;
  std::int64_t local_samples = 0;    // this rank's, in the steps run here
  std::int64_t resumed_samples = 0;  // every rank's, in the steps a resume skipped
  double seconds = 0;                // wall time of the steps, a resume's skipped ones included
};

// What one epoch's steps need, fixed for the run.
struct EpochContext {
  ddp::worker::ProcessGroup& pg;
  TrainingTask& task;
  ddp::worker::DistributedDataParallel* ddp;  // made anew by an in-place recovery (make_ddp)
  torch::optim::Optimizer& optimizer;
  std::vector<at::Tensor> params;
  ProgressPrinter& progress;
  const LoopHooks& hooks;
  int epochs = 0;
  int batch_size = 0;
  int restart_count = 0;
  std::int64_t steps_per_epoch = 0;
  BatchHalves* halves = nullptr;  // each batch in two halves (batch_halves.h), or the whole batch
  // On every rank after each step but an epoch's last (the epoch's
  // checkpoint follows that one), with the steps done in the epoch and
  // the sums so far; may be collective. Empty: nothing.
  std::function<void(int epoch, std::int64_t steps_done, const EpochSteps& so_far)> after_step;
  // The options of a step (trainer.h, TrainOptions): batches per optimizer
  // step (the first ones under DDP's no_sync), the clipping norm (0: off),
  // and whether a last partial batch is dropped.
  int accumulate_batches = 1;
  double grad_clip_norm = 0;
  bool drop_last = false;
  // This epoch's steps end here (<= steps_per_epoch: --total_steps may end
  // the run within it). Set by the caller before each epoch.
  std::int64_t epoch_end_step = 0;
  // Asked for the rate before every step (lr_schedule.h); null: unchanged.
  LrSchedule* schedule = nullptr;
  // On every rank after every step, before after_step (callbacks, a
  // mid-epoch evaluation; may be collective). Empty: nothing.
  std::function<void(const StepEnd& end)> on_step_end;
  // In-place recovery (in_place_recovery.h), null: none. A failed step is
  // then redone after the group is re-formed: drop_ddp and make_ddp drop
  // DDP before and make it anew after (ddp points at the new one).
  InPlaceRecovery* recovery = nullptr;
  std::function<void()> drop_ddp, make_ddp;
  // A returning rank (in-place recovery): the first epoch starts at this
  // step with these sums, not at state.epoch_steps_done; used once.
  std::int64_t join_step = -1;
  EpochSteps join_sums;
};

// Sets every parameter group's learning rate.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

// Runs steps state.epoch_steps_done .. ctx.epoch_end_step - 1 of `epoch`
// over this rank's `indices` (the sampler's, in order), starting from the
// sums state.epoch_* of the steps before them (a step checkpoint's) and
// advancing state.global_step. Leaves state.epoch_* as it found them.
EpochSteps train_epoch(EpochContext& ctx, int epoch, const std::vector<std::int64_t>& indices, TrainState& state);

}  // namespace ddp::loop
