#pragma once
// Code a program or a test hangs on the loop (trainer.h): a list of
// Callbacks, each told of every step's end (with its loss and learning
// rate), every evaluation's end (mid-epoch with --eval_every_steps, and each
// epoch's) and every epoch's end (its metrics.jsonl record), in that order
// within a step and in the list's order. The loop calls them on every rank
// (a callback that writes files checks the rank it is given); they run on
// the loop's thread between steps and may be collective only if they are
// on every rank. Writing metrics.jsonl is the loop's default callback
// (metrics_log.h), first in the list. A callback never changes the
// training: the model, the optimizer and the state are not its.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/loop/metrics_log.h"

namespace ddp::loop {

struct StepEnd {
  int rank = 0;
  int epoch = 0;
  std::int64_t step = 0;         // in the epoch, 1-based
  std::int64_t steps = 0;        // in the epoch
  std::int64_t global_step = 0;  // steps done in the run, this one included
  double loss = 0;               // this rank's mean loss of the step (over its batches when accumulating)
  double learning_rate = 0;      // the rate the step ran at
  double grad_norm = -1;         // the averaged gradients' norm before clipping; -1 without --grad_clip_norm
};

struct EvalEnd {
  int rank = 0;
  int epoch = 0;                 // the epoch it ran in
  std::int64_t global_step = 0;  // steps done when it ran
  bool epoch_end = false;        // the epoch's own evaluation, or a mid-epoch one (--eval_every_steps)
  double test_loss = 0;
  std::int64_t samples = 0;
  std::vector<std::pair<std::string, double>> metrics;  // the task's, as in EpochRecord
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_step_end(const StepEnd& e) { (void)e; }
  virtual void on_eval_end(const EvalEnd& e) { (void)e; }
  // After the epoch's checkpoint is saved; `rank` is the caller's.
  virtual void on_epoch_end(int rank, const EpochRecord& r) {
    (void)rank;
    (void)r;
  }
};

using Callbacks = std::vector<std::shared_ptr<Callback>>;

}  // namespace ddp::loop
