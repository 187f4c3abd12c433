#pragma once
// metrics.jsonl in the checkpoint directory: one JSON object per finished
// epoch, appended by rank 0, so runs can be plotted (pandas.read_json(...,
// lines=True)). Each line is written with one write(2) on an O_APPEND
// descriptor and fsync'd, so a crash leaves whole lines only. On resume the
// lines of epochs after the checkpoint are dropped, since those epochs are
// replayed and would otherwise appear twice (the file is rewritten with
// write_file_atomically). A line is appended only after its epoch's
// checkpoint is saved, so every "checkpoint" it names exists.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ddp::loop {

struct EpochRecord {
  int epoch = 0;
  std::int64_t global_step = 0;
  double train_loss = 0;      // mean over the epoch's steps, averaged over ranks
  double test_loss = 0;
  // The task's metrics (TrainingTask::eval_metrics), in its order; a
  // classifier's accuracy, macro_f1, micro_f1.
  std::vector<std::pair<std::string, double>> metrics;
  double learning_rate = 0;   // the rate used during this epoch
  std::int64_t train_samples = 0;  // global, this epoch
  std::int64_t eval_samples = 0;   // test samples counted (10000 on the full set)
  double train_seconds = 0;
  double samples_per_second = 0;   // global training throughput
  int world_size = 1;
  std::string checkpoint;     // file saved for this epoch
};

// The record as one JSON line (no trailing newline).
std::string to_json_line(const EpochRecord& r);

// Appends one line to `path`. Throws std::runtime_error naming the path.
void append_metrics(const std::string& path, const EpochRecord& r);

// Keeps only lines whose "epoch" is <= last_epoch (atomically rewritten);
// a missing file is fine. Throws std::runtime_error naming the path.
void truncate_metrics_after(const std::string& path, int last_epoch);

// Appends `line` (an epoch's to_json_line) unless `path` already has a line
// for `epoch`: a resume's repair when the process died between saving that
// epoch's checkpoint and appending its line. Returns whether it appended.
bool restore_metrics_line(const std::string& path, int epoch, const std::string& line);

}  // namespace ddp::loop
