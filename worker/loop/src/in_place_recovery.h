#pragma once
// In-place recovery in the loop (docs/worker-runtime.md, "In-place
// recovery"): with ddp-launch's --recovery in_place a lost rank comes back
// alone and the survivors keep their state. A survivor's step fails inside
// its collectives, before the optimizer's step, so its weights and
// optimizer are still those of the step's start; what the step's forward
// changed (the model's buffers, e.g. BatchNorm's running statistics, and
// the generator) and the loop's own numbers are kept in memory at each
// step's start: no copy of the weights per step. A ring allreduce may
// finish on one survivor and not on another, so survivors can be one step
// apart: the one ahead completed the step with every rank's gradients, so
// its state is the uninterrupted run's. After the group is re-formed under
// the launcher's new generation (ddp/worker/recovery.h) the ranks agree
// through the store on the latest step a survivor started; the lowest
// survivor there sends its state (rank_snapshot.h's bytes) to the returning
// ranks (one, or several lost together) and to any survivor behind (no disk
// read), DDP is made anew, and
// every rank redoes that step: bit for bit an uninterrupted run. Called by
// train_epoch.cpp (survivors) and trainer.cpp (the returning rank).
// Internal to the loop library; it never writes files.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train_epoch.h"
#include "ddp/loop/train_state.h"

namespace torch::nn {
class Module;
}

namespace ddp::loop {

// Where every rank goes on after a recovery: the state at the start of the
// step to redo, this rank's sums of the epoch until then, and the step.
struct RedoPoint {
  TrainState state;
  EpochSteps sums;
  int epoch = 0;
  std::int64_t step = 0;  // 0-based in the epoch
};

class InPlaceRecovery {
 public:
  // On when the launcher offers it and the group can take part
  // (ddp::worker::recovery_possible); then it advertises on the page.
  InPlaceRecovery(ddp::worker::ProcessGroup& pg, torch::nn::Module& model, torch::optim::Optimizer& optimizer);
  // Left by an exception (the loop stopped with an error: a failure outside
  // a step, or a step's that was not a recovery): the rank stops
  // advertising, so the launcher does not count it as a survivor that can
  // join a recovery.
  ~InPlaceRecovery();
  InPlaceRecovery(const InPlaceRecovery&) = delete;
  InPlaceRecovery& operator=(const InPlaceRecovery&) = delete;
  bool on() const { return on_; }

  // At the start of each step, before anything of it changes. A returning
  // rank advertises here, at its first step (the one redone): the
  // launcher's sign that it is back. A survivor, which stops advertising
  // before it touches the new generation's store keys, advertises again one
  // step later: once the redone step's collectives have met every returning
  // rank, which had advertised by then. So the launcher reads "a survivor
  // still advertising while no returning rank is back" as "it never began
  // to re-form" (a rank lost then joins the recovery).
  // `state` is left as it was (its generator states are set aside while it
  // is copied).
  void step_started(int epoch, std::int64_t step, TrainState& state, const EpochSteps& sums);

  // Throws when the group was aborted for a recovery (an NCCL group: its
  // collective in flight returned, yet the step is void).
  void check_interrupted() const;

  // A step failed: whether the launcher asks for a recovery (its new
  // generation on this rank's page), waited for at most
  // ddp::worker::recovery_wait() (read at construction).
  bool requested() const;

  // The survivors' side: drop DDP (`drop_ddp`), re-form the group, agree on
  // the step, restore it, hand it to the returning rank, make DDP anew
  // (`make_ddp`). Throws std::runtime_error when the ranks cannot agree.
  RedoPoint recover(const std::function<void()>& drop_ddp, const std::function<void()>& make_ddp);

  // The returning rank's side, once its group is formed under
  // DDP_RECOVERY_GENERATION: the state from the lowest survivor. The caller
  // makes DDP next (the survivors do the same then).
  RedoPoint join();

 private:
  // A step's start: the loop's numbers, the model's buffers and the
  // generator (the weights and the optimizer need no copy: see above).
  struct Kept {
    std::int64_t global_step = -1;  // -1: none
    int epoch = 0;
    std::int64_t step = 0;
    TrainState state;
    EpochSteps sums;
    std::vector<at::Tensor> buffers;
    at::Tensor cpu_rng;
    at::Tensor device_rng;  // a CUDA rank's
  };
  RedoPoint meet(bool survivor);
  void restore_kept();
  void keep_device_rng();

  ddp::worker::ProcessGroup& pg_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  bool on_ = false;
  std::chrono::milliseconds wait_;  // recovery_wait()
  bool advertised_ = false;
  int quiet_steps_ = 0;  // step starts a survivor lets pass before it advertises again
  int exceptions_at_start_ = 0;
  Kept current_;
  // Empty between calls: where step_started parks the per-rank generator
  // states while it copies the rest.
  std::vector<std::string> rng_aside_, device_rng_aside_;
};

}  // namespace ddp::loop
