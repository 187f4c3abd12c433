#pragma once
// The training job of one rank: the seeds' DDP loop, for any program that
// gives it a TrainingTask (training_task.h: data, model, and what differs
// from a classifier's defaults). Per epoch: DistributedSampler.set_epoch,
// optimizer steps through the DDP wrapper (gradients averaged by the
// runtime), the train loss averaged over ranks, evaluation of the whole test
// set split contiguously across ranks (every sample counted once, the task's
// sums added up), the learning-rate schedule (ReduceLROnPlateau on the
// task's monitored metric, or warm-up and cosine per step: lr_schedule.h),
// metrics.jsonl and a per-epoch checkpoint written by rank 0, the best epoch
// of each tracked metric. Resumes from the latest checkpoint when asked to
// (or after a restart), so a killed job replays only the interrupted epoch.
// Only rank 0 prints. The parts: checkpoint_run.h (the directory, its lock,
// resume), train_epoch.h (the steps of one epoch), evaluation.h.

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "ddp/loop/callbacks.h"
#include "ddp/loop/metrics_log.h"
#include "ddp/loop/train_options.h"
#include "ddp/loop/train_state.h"
#include "ddp/loop/training_task.h"

namespace ddp::worker {
class ProcessGroup;
}

namespace ddp::loop {

struct TrainResult {
  TrainState state;                 // after the last epoch
  std::vector<EpochRecord> epochs;  // epochs run by this process (not resumed ones)
};

// What a program (or a test) may hang on the loop; nothing by default.
struct LoopHooks {
  // On every rank before each training step, with the global step about to
  // run (0 = the run's first) and TORCHELASTIC_RESTART_COUNT.
  std::function<void(int rank, std::int64_t global_step, int restart_count)> before_step;
  // The same, inside each step after its collectives and before the
  // optimizer's step: an exception here is the step failing on this rank
  // alone (the tests' fault programs make a survivor a step behind so).
  std::function<void(int rank, std::int64_t global_step, int restart_count)> after_collectives;
  // Told of every step's, evaluation's and epoch's end, in this order,
  // after the loop's own metrics.jsonl writer (callbacks.h).
  Callbacks callbacks;
};

// Runs the job on this rank. `out` gets rank 0's progress and summary;
// `out_is_tty` picks the progress bar over plain lines. Throws on I/O or
// communication errors (messages name the file or the operation).
TrainResult run_training(const TrainOptions& opts, const std::shared_ptr<ddp::worker::ProcessGroup>& pg,
                         TrainingTask& task, std::ostream& out, bool out_is_tty, const LoopHooks& hooks = {});

}  // namespace ddp::loop
