#include "train_epoch.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "batch_halves.h"
#include "format.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/peer_failure.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/training_step.h"

namespace ddp::loop {
namespace {

using Clock = std::chrono::steady_clock;

// Stops every rank together when a loss is NaN or infinite: one all-reduce
// (min) of "the lowest rank whose loss is not finite" per step. That rank
// names its loss; the others follow it (PeerFailure).
void stop_on_non_finite_loss(ddp::worker::ProcessGroup& pg, double loss, int epoch, std::int64_t step,
                             std::int64_t steps, std::int64_t global_step, double lr) {
  const int rank = pg.rank();
  const int world = pg.world_size();
  at::Tensor first_bad = at::full({1}, static_cast<double>(std::isfinite(loss) ? world : rank),
                                  at::TensorOptions().dtype(at::kDouble).device(pg.device()));
  pg.allreduce(first_bad, ddp::worker::ReduceOp::Min);
  const int bad = static_cast<int>(first_bad.cpu().item<double>());
  if (bad >= world) return;
  const std::string where = "epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + " of " +
                            std::to_string(steps) + " (global step " + std::to_string(global_step) + ")";
  if (!std::isfinite(loss)) {
    const std::string value = std::isnan(loss) ? "nan" : fmt("%g", loss);  // not "-nan"
    throw std::runtime_error("training diverged: the loss of rank " + std::to_string(rank) + " is " + value + " at " +
                             where + " with learning rate " + fmt("%g", lr) +
                             "; every rank stops. Lower --learning_rate, or check the data");
  }
  throw ddp::worker::PeerFailure(bad, "training stopped at " + where + ": the loss of rank " + std::to_string(bad) +
                                          " is not finite (see rank " + std::to_string(bad) + "'s error)");
}

}  // namespace

EpochSteps train_epoch(EpochContext& ctx, int epoch, const std::vector<std::int64_t>& indices, TrainState& state) {
  ddp::worker::ProcessGroup& pg = ctx.pg;
  const int rank = pg.rank();
  const int world = pg.world_size();
  const c10::Device device = pg.device();
  const auto t0 = Clock::now();
  EpochSteps r;
  const BatchHalves::Steps threads(ctx.halves);
  for (std::int64_t step = 0; step < ctx.steps_per_epoch; ++step) {
    ddp::worker::training_step(pg, static_cast<std::uint64_t>(state.global_step + 1));  // the heartbeat's step
    if (ctx.hooks.before_step) ctx.hooks.before_step(rank, state.global_step, ctx.restart_count);
    const std::int64_t begin = step * ctx.batch_size;
    const std::int64_t n = std::min<std::int64_t>(ctx.batch_size, static_cast<std::int64_t>(indices.size()) - begin);
    auto index = torch::from_blob(const_cast<std::int64_t*>(indices.data() + begin), {n}, torch::kLong);

    // Zeroed in place, not set to none (LibTorch 2.x's zero_grad default):
    // the gradients stay DDP's bucket views, so backward accumulates into
    // the buckets and nothing is copied or allocated for them per step.
    for (auto p : ctx.params)
      if (p.grad().defined()) {
        p.mutable_grad().detach_();
        p.mutable_grad().zero_();
      }
    ctx.ddp.prepare_forward();
    at::Tensor loss;
    double step_loss = 0;
    if (ctx.halves) {
      step_loss = ctx.halves->forward(index, device);
    } else {
      loss = ctx.task.loss(ctx.task.forward_train(index, device), LossReduction::Mean);
      step_loss = loss.item<double>();
    }
    // Before backward, so a diverged step changes no weights.
    stop_on_non_finite_loss(pg, step_loss, epoch, step + 1, ctx.steps_per_epoch, state.global_step + 1,
                            state.learning_rate);
    if (ctx.halves) ctx.halves->backward();
    else loss.backward();  // DDP averages the gradients across ranks here
    ctx.optimizer.step();

    r.loss_sum += step_loss;
    r.local_samples += n;
    state.global_step += 1;

    ProgressSnapshot snap;
    snap.epoch = epoch;
    snap.epochs = ctx.epochs;
    snap.step = step + 1;
    snap.steps = ctx.steps_per_epoch;
    snap.loss = r.loss_sum / static_cast<double>(step + 1);
    snap.samples = r.local_samples * world;
    snap.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
    ctx.progress.update(snap);
  }
  ctx.progress.finish_epoch();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace ddp::loop
