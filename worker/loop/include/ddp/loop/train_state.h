#pragma once
// Everything besides the model's and the optimizer's tensors that a rank of
// the loop needs to continue exactly where it stopped, at an epoch's end or
// mid-epoch: epoch and step counters, the position in the epoch, the
// learning rate, ReduceLROnPlateau's state, the best scores so far and every
// rank's generator states. The sampler's order is a function of (seed,
// epoch), so its position is the steps done in the epoch. Stored in the
// worker runtime's Checkpoint (metrics / strings / tensors maps, keys
// "train.*") next to the model and the optimizer's state; rank_snapshot.h
// makes the whole of it one Checkpoint, as a file or as bytes for another
// rank. A schedule other than the plateau keeps its state under
// "train.schedule.*" (lr_schedule.h), the task its own under "task.*"
// (TrainingTask::save_state). Torch-free.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ddp/loop/plateau_scheduler.h"

namespace ddp::worker {
struct Checkpoint;
}

namespace ddp::loop {

// A task's own state in the checkpoint (TrainingTask::save_state /
// load_state): a vocabulary, a position in a stream. Under the task's keys,
// stored as "task.<key>" in the checkpoint's numbers, strings (text, which
// Python reads as str) and tensors (bytes, as uint8 tensors).
struct TaskState {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
  std::map<std::string, std::string> bytes;
  bool operator==(const TaskState& o) const {
    return numbers == o.numbers && strings == o.strings && bytes == o.bytes;
  }
};

// Where a tracked metric's best epoch is kept in the checkpoint: by default
// "train.best.<metric>", ".epoch" and ".checkpoint"; a task may keep older
// names (TrainingTask::best_keys: the classifier's macro_f1 and micro_f1).
struct BestKeys {
  std::string value, epoch, checkpoint;
};
using LegacyBestKeys = std::map<std::string, BestKeys>;  // by metric; the others get the default keys

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
  PlateauState plateau;  // ReduceLROnPlateau's, the default schedule ("train.plateau.*")
  // Another schedule's name and state ("train.schedule", "train.schedule.*";
  // "" and empty for the plateau and in older checkpoints).
  std::string schedule_name;
  std::map<std::string, double> schedule;
  // By metric name; a checkpoint holds the tracked metrics of the task that
  // wrote it.
  std::map<std::string, BestScore> best;
  // Recorded to tell the user when a resume changes the job's shape.
  int world_size = 0;
  int batch_size = 0;
  int accumulate_batches = 1;  // batches per optimizer step ("train.accumulate_batches" when > 1)
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

  // Mid-epoch (a step checkpoint): the steps of epoch epochs_done + 1
  // already run, 0 at an epoch's end; a resume skips them, so the sampler
  // continues at sample epoch_steps_done * batch_size of each rank.
  std::int64_t epoch_steps_done = 0;
  // That epoch's sums so far, for its line: the steps' mean losses summed
  // over steps and ranks, the samples of every rank, rank 0's seconds.
  double epoch_loss_sum = 0;
  std::int64_t epoch_samples = 0;
  double epoch_seconds = 0;
  // Each rank's generator states at the snapshot, by rank, as the raw bytes
  // of at::Generator::get_state(): LibTorch's CPU generator and, on a GPU,
  // the rank's device generator. Empty in checkpoints of loops before they
  // were kept (then every rank takes the checkpoint's rng_state, rank 0's).
  std::vector<std::string> cpu_rng;
  std::vector<std::string> device_rng;
  // The task's own (TrainingTask::save_state), empty when it keeps none.
  TaskState task;
};

// The keys of a metric's best epoch: `legacy`'s entry, or the default ones.
BestKeys best_keys_of(const std::string& metric, const LegacyBestKeys& legacy);

// Writes `s` into the checkpoint's metrics/strings/tensors maps (keys
// "train.*" and "task.*"), the best epochs under `legacy`'s keys where it
// names them.
void store_train_state(const TrainState& s, ddp::worker::Checkpoint& ckpt, const LegacyBestKeys& legacy = {});
// Reads it back; throws std::runtime_error naming the missing key when the
// checkpoint was not written by this training loop. Keys added since (the
// position in the epoch, per-rank generators, the schedule, the task's
// state) read as absent: 0 / empty. `legacy` as for store_train_state.
TrainState load_train_state(const ddp::worker::Checkpoint& ckpt, const std::string& path,
                            const LegacyBestKeys& legacy = {});

}  // namespace ddp::loop
