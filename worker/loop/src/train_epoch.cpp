#include "train_epoch.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "batch_halves.h"
#include "in_place_recovery.h"
#include "format.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/fused_adam.h"
#include "ddp/worker/peer_failure.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/training_step.h"

namespace ddp::loop {
namespace {

using Clock = std::chrono::steady_clock;

// Stops every rank together when a loss is NaN or infinite: one all-reduce
// per step of a vector with an entry per rank, 1 where that rank's loss is
// not finite; the lowest such rank names its loss, the others follow it
// (PeerFailure). A sum, not a min of one rank number: one machine's ranks
// then add it through shared memory, where Gloo's min over TCP took
// 0.5-0.8 ms a step.
// Returns the stop to throw (null: none), so that a caller catching a
// collective's failure never takes the loop's own stop for one.
std::exception_ptr stop_on_non_finite_loss(ddp::worker::ProcessGroup& pg, double loss, int epoch, std::int64_t step,
                                           std::int64_t steps, std::int64_t global_step, double lr) {
  const int rank = pg.rank();
  const int world = pg.world_size();
  at::Tensor not_finite = at::zeros({world}, at::TensorOptions().dtype(at::kDouble));
  if (!std::isfinite(loss)) not_finite[rank] = 1.0;
  if (!pg.device().is_cpu()) not_finite = not_finite.to(pg.device());
  pg.allreduce(not_finite, ddp::worker::ReduceOp::Sum);
  const at::Tensor found = not_finite.cpu().nonzero();
  if (found.numel() == 0) return nullptr;
  const int bad = static_cast<int>(found[0][0].item<std::int64_t>());
  const std::string where = "epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + " of " +
                            std::to_string(steps) + " (global step " + std::to_string(global_step) + ")";
  if (!std::isfinite(loss)) {
    const std::string value = std::isnan(loss) ? "nan" : fmt("%g", loss);  // not "-nan"
    return std::make_exception_ptr(std::runtime_error(
        "training diverged: the loss of rank " + std::to_string(rank) + " is " + value + " at " + where +
        " with learning rate " + fmt("%g", lr) + "; every rank stops. Lower --learning_rate, or check the data"));
  }
  return std::make_exception_ptr(ddp::worker::PeerFailure(
      bad, "training stopped at " + where + ": the loss of rank " + std::to_string(bad) + " is not finite (see rank " +
               std::to_string(bad) + "'s error)"));
}

// The FusedAdam that steps every one of `params` (so its step zeroes every
// gradient the loop would), or nullptr.
ddp::worker::FusedAdam* fused_adam_over(torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params) {
  auto* fused = dynamic_cast<ddp::worker::FusedAdam*>(&optimizer);
  if (!fused) return nullptr;
  std::unordered_set<const void*> stepped;
  for (const auto& group : fused->param_groups())
    for (const auto& p : group.params()) stepped.insert(p.unsafeGetTensorImpl());
  for (const auto& p : params)
    if (!stepped.count(p.unsafeGetTensorImpl())) return nullptr;
  return fused;
}

// For an epoch of batch halves: FusedAdam's loop on both of their threads
// (the calling thread has one intra-op thread then, and the helper idles
// between backward and the next forward); as before once the epoch ends.
class AdamOnHalves {
 public:
  AdamOnHalves(torch::optim::Optimizer& optimizer, BatchHalves* halves)
      : adam_(halves ? dynamic_cast<ddp::worker::FusedAdam*>(&optimizer) : nullptr) {
    if (adam_)
      adam_->set_parallel_for([halves](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
        halves->parallel_for(n, body);
      });
  }
  ~AdamOnHalves() {
    if (adam_) adam_->set_parallel_for({});
  }
  AdamOnHalves(const AdamOnHalves&) = delete;
  AdamOnHalves& operator=(const AdamOnHalves&) = delete;

 private:
  ddp::worker::FusedAdam* adam_;
};

// One step's forward and backward on this rank's `n` samples from `first`:
// the whole batch, its two halves at once, or (--accumulate_batches) its
// batches of ctx.batch_size, all but the last under DDP's no_sync so their
// gradients add up locally and the last backward averages the sum. Each
// batch's mean loss is weighted by its share of the n samples, so the
// gradients are those of one batch of n, up to float rounding. Returns the
// step's mean loss.
double forward_backward(EpochContext& ctx, const std::int64_t* first, std::int64_t n, c10::Device device) {
  const auto batch_index = [&](std::int64_t begin, std::int64_t count) {
    return torch::from_blob(const_cast<std::int64_t*>(first + begin), {count}, torch::kLong);
  };
  if (n <= ctx.batch_size) {
    const at::Tensor index = batch_index(0, n);
    ctx.ddp->prepare_forward();
    if (ctx.halves) {
      const double step_loss = ctx.halves->forward(index, device);
      ctx.halves->backward();
      return step_loss;
    }
    const at::Tensor loss = ctx.task.loss(ctx.task.forward_train(index, device), LossReduction::Mean);
    const double step_loss = loss.item<double>();
    loss.backward();  // DDP averages the gradients across ranks here
    return step_loss;
  }
  double step_loss = 0;
  for (std::int64_t begin = 0; begin < n; begin += ctx.batch_size) {
    const std::int64_t count = std::min<std::int64_t>(ctx.batch_size, n - begin);
    const bool last = begin + count >= n;
    const double share = static_cast<double>(count) / static_cast<double>(n);
    std::optional<ddp::worker::DistributedDataParallel::NoSyncGuard> local;
    if (!last) local.emplace(*ctx.ddp);  // decided at the forward: only recorded
    ctx.ddp->prepare_forward();
    const at::Tensor loss =
        ctx.task.loss(ctx.task.forward_train(batch_index(begin, count), device), LossReduction::Mean) * share;
    step_loss += loss.item<double>();
    loss.backward();
  }
  return step_loss;
}

// The averaged gradients' global L2 norm, clipped to ctx.grad_clip_norm
// (every rank holds the same averages, so each computes the same norm
// without a collective); -1 when clipping is off.
double clip_gradients(const EpochContext& ctx) {
  if (ctx.grad_clip_norm <= 0) return -1;
  return torch::nn::utils::clip_grad_norm_(ctx.params, ctx.grad_clip_norm);
}

// The schedule's rate for the step about to run, into the optimizer.
void schedule_step(EpochContext& ctx, TrainState& state) {
  if (!ctx.schedule) return;
  const double lr = ctx.schedule->at_step(state.global_step, state.learning_rate);
  if (lr == state.learning_rate) return;
  set_learning_rate(ctx.optimizer, lr);
  state.learning_rate = lr;
}

}  // namespace

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

EpochSteps train_epoch(EpochContext& ctx, int epoch, const std::vector<std::int64_t>& indices, TrainState& state) {
  ddp::worker::ProcessGroup& pg = ctx.pg;
  const int rank = pg.rank();
  const int world = pg.world_size();
  const c10::Device device = pg.device();
  const auto t0 = Clock::now();
  EpochSteps r;
  // A resumed epoch: the skipped steps' sums, this rank's share of the loss
  // (the epoch's loss is the mean over ranks of these sums).
  r.loss_sum = state.epoch_loss_sum / static_cast<double>(world);
  r.resumed_samples = state.epoch_samples;
  const double seconds_before = state.epoch_seconds;
  const BatchHalves::Steps threads(ctx.halves);
  const AdamOnHalves adam_threads(ctx.optimizer, ctx.halves);
  // FusedAdam zeroes the gradients in its own pass over them: then the
  // next step has nothing to zero.
  auto* const fused = fused_adam_over(ctx.optimizer, ctx.params);
  bool grads_zero = false;
  // A step takes accumulate_batches batches; with drop_last only whole ones.
  const std::int64_t per_step = static_cast<std::int64_t>(ctx.batch_size) * ctx.accumulate_batches;
  const auto size = static_cast<std::int64_t>(indices.size());
  const std::int64_t usable = ctx.drop_last ? size / ctx.batch_size * ctx.batch_size : size;
  std::int64_t first = state.epoch_steps_done;
  if (ctx.join_step >= 0) {  // a returning rank: where the survivors redo
    first = ctx.join_step;
    r = ctx.join_sums;
    ctx.join_step = -1;
  }
  for (std::int64_t step = first; step < ctx.epoch_end_step; ++step) {
    ddp::worker::training_step(pg, static_cast<std::uint64_t>(state.global_step + 1));  // the heartbeat's step
    if (ctx.hooks.before_step) ctx.hooks.before_step(rank, state.global_step, ctx.restart_count);
    if (ctx.recovery) ctx.recovery->step_started(epoch, step, state, r);
    schedule_step(ctx, state);
    const std::int64_t begin = step * per_step;
    const std::int64_t n = std::min<std::int64_t>(per_step, usable - begin);

    // Zeroed in place, not set to none (LibTorch 2.x's zero_grad default):
    // the gradients stay DDP's bucket views, so backward accumulates into
    // the buckets and nothing is copied or allocated for them per step.
    if (!grads_zero)
      for (auto p : ctx.params)
        if (p.grad().defined()) {
          p.mutable_grad().detach_();
          p.mutable_grad().zero_();
        }
    double step_loss = 0;
    std::exception_ptr stop;
    try {
      step_loss = forward_backward(ctx, indices.data() + begin, n, device);
      // Before the optimizer's step, so a diverged step changes no weights;
      // after backward, so its all-reduce comes right after DDP's, where the
      // ranks have just met: before backward it held the faster rank between
      // its forward and its backward at every step (a second wait for the
      // slower one; 0.7 ms a step in a 2-process ddp-train run).
      stop = stop_on_non_finite_loss(pg, step_loss, epoch, step + 1, ctx.steps_per_epoch, state.global_step + 1,
                                     state.learning_rate);
      if (ctx.hooks.after_collectives) ctx.hooks.after_collectives(rank, state.global_step, ctx.restart_count);
      if (ctx.recovery) ctx.recovery->check_interrupted();
    } catch (const std::exception&) {
      // A peer was lost in a collective: with in-place recovery the
      // launcher brings it back and says so on this rank's page within
      // milliseconds; otherwise (or for any other error) the step's error.
      if (!ctx.recovery || !ctx.recovery->requested()) throw;
      const RedoPoint p = ctx.recovery->recover(ctx.drop_ddp, ctx.make_ddp);
      if (p.epoch != epoch)
        throw std::runtime_error("in-place recovery: the step to redo is in epoch " + std::to_string(p.epoch) +
                                 ", not in epoch " + std::to_string(epoch) + "; the group must restart");
      state = p.state;
      r = p.sums;
      grads_zero = false;
      step = p.step - 1;  // the loop's ++step: redo p.step
      continue;
    }
    if (stop) std::rethrow_exception(stop);
    const double grad_norm = clip_gradients(ctx);
    if (fused) fused->step_and_zero_grad();
    else ctx.optimizer.step();
    grads_zero = fused != nullptr;

    r.loss_sum += step_loss;
    r.local_samples += n;
    state.global_step += 1;

    ProgressSnapshot snap;
    snap.epoch = epoch;
    snap.epochs = ctx.epochs;
    snap.step = step + 1;
    snap.steps = ctx.steps_per_epoch;
    snap.loss = r.loss_sum / static_cast<double>(step + 1);
    snap.samples = r.local_samples * world + r.resumed_samples;
    snap.elapsed_s = seconds_before + std::chrono::duration<double>(Clock::now() - t0).count();
    ctx.progress.update(snap);
    if (ctx.on_step_end)
      ctx.on_step_end({rank, epoch, step + 1, ctx.steps_per_epoch, state.global_step, step_loss, state.learning_rate,
                       grad_norm});
    if (ctx.after_step && step + 1 < ctx.epoch_end_step) {
      r.seconds = snap.elapsed_s;
      ctx.after_step(epoch, step + 1, r);
    }
  }
  ctx.progress.finish_epoch();
  r.seconds = seconds_before + std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace ddp::loop
