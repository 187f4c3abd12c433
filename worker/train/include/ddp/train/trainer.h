#pragma once
// The training job of one rank: the seeds' DDP loop, shared by ddp-train
// and ddp-text; the program gives its data and model (training_task.h).
// Per epoch: DistributedSampler.set_epoch, Adam steps through the DDP wrapper
// (gradients averaged by the runtime), the train loss averaged over ranks,
// evaluation of the whole test set split contiguously across ranks (every
// sample counted once, confusion matrices summed), ReduceLROnPlateau on
// macro-F1, metrics.jsonl and a per-epoch checkpoint written by rank 0.
// Resumes from the latest checkpoint when asked to (or after a restart), so a
// killed job replays only the interrupted epoch. Only rank 0 prints.

#include <memory>
#include <ostream>
#include <vector>

#include "ddp/train/metrics_log.h"
#include "ddp/train/train_options.h"
#include "ddp/train/train_state.h"
#include "ddp/train/training_task.h"

namespace ddp::worker {
class ProcessGroup;
}

namespace ddp::train {

struct TrainResult {
  TrainState state;                 // after the last epoch
  std::vector<EpochRecord> epochs;  // epochs run by this process (not resumed ones)
};

// Runs the job on this rank. `out` gets rank 0's progress and summary;
// `out_is_tty` picks the progress bar over plain lines. Throws on I/O or
// communication errors (messages name the file or the operation).
TrainResult run_training(const TrainOptions& opts, const std::shared_ptr<ddp::worker::ProcessGroup>& pg,
                         TrainingTask& task, std::ostream& out, bool out_is_tty);

}  // namespace ddp::train
