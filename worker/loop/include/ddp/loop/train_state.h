#pragma once
// Everything besides tensors that a resumed run of the loop needs to continue
// exactly where the last finished epoch left it: epoch and step counters,
// the learning rate, ReduceLROnPlateau's state and the best scores so far.
// Stored in the worker runtime's Checkpoint (metrics / strings maps) next to
// the model, Adam's moments and the RNG state; the sampler needs no state
// because its order is a function of (seed, epoch).

#include <cstdint>
#include <map>
#include <string>

#include "ddp/loop/plateau_scheduler.h"

namespace ddp::worker {
struct Checkpoint;
}

namespace ddp::loop {

// The best epoch of one tracked metric (TrainingTask::tracked()).
struct BestScore {
  double value = 0;
  int epoch = 0;  // 0: none yet, so the first epoch sets it
  // The file's name in the checkpoint directory ("epoch_3.pt"), so it stays
  // right when the directory is moved; read from older checkpoints, which
  // stored the path as written ("runs/a/epoch_3.pt"), as that name too.
  std::string checkpoint;
};

struct TrainState {
  int epochs_done = 0;
  std::int64_t global_step = 0;
  double learning_rate = 0;
  PlateauState plateau;
  // By metric name; a checkpoint holds the tracked metrics of the task that
  // wrote it.
  std::map<std::string, BestScore> best;
  // Recorded to tell the user when a resume changes the job's shape.
  int world_size = 0;
  int batch_size = 0;
  // format_identity(run_identity(options)) of the run that wrote it
  // (run_identity.h); "" in checkpoints of loops before it recorded one.
  std::string run_identity;
  // The launches (launch_directory, as "host:dir") of the ranks of the job
  // that wrote it, one per line: a restart resumes only a checkpoint of its
  // own launch. "" in older checkpoints and without a known launch.
  std::string launches;
  // The metrics.jsonl line of the epoch it ends, written after the
  // checkpoint; a resume puts it back when a crash came in between.
  std::string metrics_line;
};

// Writes `s` into the checkpoint's metrics/strings maps (keys "train.*").
void store_train_state(const TrainState& s, ddp::worker::Checkpoint& ckpt);
// Reads it back; throws std::runtime_error naming the missing key when the
// checkpoint was not written by this training loop.
TrainState load_train_state(const ddp::worker::Checkpoint& ckpt, const std::string& path);

}  // namespace ddp::loop
