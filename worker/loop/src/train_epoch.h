#pragma once
// The training steps of one epoch (trainer.h): per step the heartbeat's step,
// the hooks, the gradients zeroed in place, DDP's prepare_forward, the
// task's forward and loss (on the whole batch, or on two halves at once:
// batch_halves.h), the non-finite-loss stop (every rank together), backward
// (DDP averages the gradients) and the optimizer's step, then the progress
// line. Internal to the loop library.

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

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

// What one epoch's steps need, fixed for the run.
struct EpochContext {
  ddp::worker::ProcessGroup& pg;
  TrainingTask& task;
  ddp::worker::DistributedDataParallel& ddp;
  torch::optim::Optimizer& optimizer;
  std::vector<at::Tensor> params;
  ProgressPrinter& progress;
  const LoopHooks& hooks;
  int epochs = 0;
  int batch_size = 0;
  int restart_count = 0;
  std::int64_t steps_per_epoch = 0;
  BatchHalves* halves = nullptr;  // each batch in two halves (batch_halves.h), or the whole batch
};

struct EpochSteps {
  double loss_sum = 0;             // of the steps' mean losses, this rank
  std::int64_t local_samples = 0;  // this rank's
  double seconds = 0;              // wall time of the steps
};

// Runs `ctx.steps_per_epoch` steps of `epoch` over this rank's `indices`
// (the sampler's, in order), advancing state.global_step.
EpochSteps train_epoch(EpochContext& ctx, int epoch, const std::vector<std::int64_t>& indices, TrainState& state);

}  // namespace ddp::loop
