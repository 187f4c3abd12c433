#pragma once
// In-place recovery in the loop (docs/worker-runtime.md, "In-place
// recovery"): with ddp-launch's --recovery in_place a lost rank comes back
// alone and the survivors keep their state. Each rank keeps, in memory, its
// whole state (rank_snapshot.h's bytes: TrainState, model, optimizer, its
// generator) at the start of the current and of the previous step: a ring
// allreduce may finish on one survivor and not on another, so survivors can
// be one step apart when the failure hits. After the group is re-formed
// under the launcher's new generation (ddp/worker/recovery.h) the ranks
// agree through the store on the earliest of those steps, each survivor
// restores its own copy of it, the lowest survivor broadcasts its copy to
// the returning rank (no disk read), DDP is made anew, and every rank redoes
// the step: the result is bit for bit an uninterrupted run's. Called by
// train_epoch.cpp (survivors) and trainer.cpp (the returning rank). Internal
// to the loop library; it never writes files.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

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
  bool on() const { return on_; }

  // At the start of each step, before anything of it changes. A returning
  // rank advertises here, at its first step (the one redone): the
  // launcher's sign that it is back.
  void step_started(int epoch, std::int64_t step, const TrainState& state, const EpochSteps& sums);

  // A step failed: whether the launcher asks for a recovery (its new
  // generation on this rank's page), waited for at most `wait`.
  bool requested(std::chrono::milliseconds wait) const;

  // The survivors' side: drop DDP (`drop_ddp`), re-form the group, agree on
  // the step, restore it, hand it to the returning rank, make DDP anew
  // (`make_ddp`). Throws std::runtime_error when the ranks cannot agree.
  RedoPoint recover(const std::function<void()>& drop_ddp, const std::function<void()>& make_ddp);

  // The returning rank's side, once its group is formed under
  // DDP_RECOVERY_GENERATION: the state from the lowest survivor. The caller
  // makes DDP next (the survivors do the same then).
  RedoPoint join();

 private:
  struct Kept {
    std::int64_t global_step = -1;  // -1: none
    int epoch = 0;
    std::int64_t step = 0;
    std::string bytes;
    EpochSteps sums;
  };
  RedoPoint meet(const Kept* mine);

  ddp::worker::ProcessGroup& pg_;
  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  bool on_ = false;
  bool advertised_ = false;
  Kept current_, previous_;
};

}  // namespace ddp::loop
