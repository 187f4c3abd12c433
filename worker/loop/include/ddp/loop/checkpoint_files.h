#pragma once
// Where the training loop keeps its checkpoints: one file per finished epoch,
// <dir>/epoch_<N>.pt (the seeds keep one model file per epoch so the best
// epochs can be picked afterwards), next to metrics.jsonl; with
// --checkpoint_every_steps also <dir>/epoch_<N>_step_<S>.pt, S steps into
// epoch N (only the newest is kept: trainer.cpp says why). Resuming tries the
// newest first, by (finished epochs, steps into the next). Path logic and
// directory listing only; reading and writing is checkpoint.h's job.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp::loop {

std::string epoch_checkpoint_path(const std::string& dir, int epoch);
std::string step_checkpoint_path(const std::string& dir, int epoch, std::int64_t step);
std::string metrics_path(const std::string& dir);

struct FoundCheckpoint {
  int epoch = 0;           // epoch_<epoch>.pt, or the epoch a step checkpoint is in
  std::string path;
  std::int64_t step = 0;   // a step checkpoint's steps into `epoch`; 0: an epoch checkpoint
  int epochs_done() const { return step > 0 ? epoch - 1 : epoch; }
};

// The newest checkpoint in `dir` (other names, including the checkpoint
// writer's temp files, are ignored); nullopt when there is none or the
// directory does not exist.
std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& dir);

// Every epoch_<N>.pt and epoch_<N>_step_<S>.pt in `dir`, newest first;
// empty when there is none or the directory does not exist.
std::vector<FoundCheckpoint> list_checkpoints(const std::string& dir);

// Every step checkpoint in `dir` (epoch_<N>_step_<S>.pt) but `keep` (a
// name, or "" for all), removed; returns their names. Rank 0 calls it
// after a newer checkpoint is safely written.
std::vector<std::string> remove_step_checkpoints(const std::string& dir, const std::string& keep);

// Removes the temp files the loop's atomic writes leave when their writer
// is killed mid-write (".epoch_<N>.pt.tmp.<pid>.<16 hex>" (atomic_file.h),
// ".epoch_<N>_step_<S>.pt.tmp.<pid>.<16 hex>",
// ".metrics.jsonl.tmp.<pid>.<16 hex>", ".ddp-loop-write-test.tmp.<pid>.<16
// hex>", the probe "ddp-loop-write-test"; older versions' names had no hex
// part, and their probe was "ddp-train-write-test") and
// returns their names. Only call it holding the directory's lock
// (checkpoint_dir_lock.h): then no live training run writes there, so every
// such file is a dead writer's. Other files are never touched.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

// "epoch_1.pt", "3 checkpoints (epoch_1.pt .. epoch_3.pt)", "epoch_1_step_4.pt",
// "2 checkpoints (epoch_1.pt .. epoch_2_step_4.pt)", with " and
// metrics.jsonl" when that file is not empty; "" for a directory holding
// neither (what a fresh run may take).
std::string describe_earlier_run(const std::string& dir);

}  // namespace ddp::loop
