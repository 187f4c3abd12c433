#pragma once
// One rank's whole state in the loop: its TrainState (train_state.h: the
// counters, the position in the epoch, the schedule, the best scores and
// every rank's generators) with the model's weights and the optimizer's
// state, as one worker Checkpoint (ddp/worker/checkpoint.h). The loop writes
// it as its epoch and step checkpoints; the same bytes (snapshot_to_bytes)
// carry it to another rank, so what a rank receives is exactly what a file
// holds and is read by the same code. Called by trainer.cpp (and by a rank
// that hands its state on); capture_rng is collective, the rest local. It
// never writes files or talks to the launcher.

#include <string>

#include <c10/core/Device.h>

#include "ddp/loop/train_state.h"
#include "ddp/worker/checkpoint.h"  // also declares Module, Optimizer and ProcessGroup

namespace ddp::loop {

// Every rank's generator states into s.cpu_rng (and s.device_rng on a
// GPU), by rank. Collective: every rank calls it at the same step.
void capture_rng(ddp::worker::ProcessGroup& pg, TrainState& s);

ddp::worker::Checkpoint make_snapshot(const TrainState& s, const torch::nn::Module& model,
                                      torch::optim::Optimizer& optimizer, const LegacyBestKeys& legacy = {});

// Puts the snapshot into the model, the optimizer and this rank's
// generators: its own states when the snapshot has one per rank of a world
// of `world_size`, else the checkpoint's rng_state (rank 0's, as loops
// before per-rank states did). Returns its TrainState; `what` names the
// source in errors (a path, "the state from rank 1"). `legacy`: the task's
// older names of best-epoch keys (TrainingTask::best_keys), as written.
TrainState restore_snapshot(const ddp::worker::Checkpoint& c, const std::string& what, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, int rank, int world_size, c10::Device device,
                            const LegacyBestKeys& legacy = {});

// The snapshot as bytes and back (the file's format, checksum included).
std::string snapshot_to_bytes(const TrainState& s, const torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer, const LegacyBestKeys& legacy = {});
TrainState restore_snapshot_bytes(const std::string& bytes, const std::string& what, torch::nn::Module& model,
                                  torch::optim::Optimizer& optimizer, int rank, int world_size, c10::Device device,
                                  const LegacyBestKeys& legacy = {});

}  // namespace ddp::loop
