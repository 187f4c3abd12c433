#pragma once
// The checkpoint directory of a run of the loop and resuming from it
// (trainer.h's first part): rank 0 prepares the directory and takes its lock,
// every rank learns the launches of the job, and rank 0 picks the checkpoint a
// resumed run continues from. Internal to the loop library.

#include <memory>
#include <ostream>
#include <string>

#include "ddp/loop/checkpoint_dir_lock.h"
#include "ddp/loop/train_options.h"

namespace ddp::worker {
class ProcessGroup;
}

namespace ddp::loop {

// Rank 0 creates the directory and checks that it can write there before
// any training, takes the directory's lock for the run (two runs never
// share a directory), removes temp files of writers killed mid-save, checks
// --save_final, and a fresh run refuses a directory holding another run's
// files (their metrics.jsonl would be lost and a restart would resume their
// checkpoints). rank0_decides stops every rank with rank 0's message.
// Returns rank 0's lock (null on the other ranks).
std::unique_ptr<CheckpointDirLock> prepare_checkpoint_dir(const TrainOptions& o, ddp::worker::ProcessGroup& pg,
                                                          std::ostream& log);

// Every rank's launch ("host:dir", launch_directory), sorted, one per line;
// "" when no rank knows its launch. Collective.
std::string gather_launches(const TrainOptions& o, ddp::worker::ProcessGroup& pg);

// Rank 0 picks the checkpoint to resume, an epoch's or a step's, and tells
// the others (the rules are at its definition). Returns its path ("": none,
// start from epoch 1). Collective.
std::string choose_resume_checkpoint(const TrainOptions& o, ddp::worker::ProcessGroup& pg,
                                     const std::string& launches, std::ostream& log);

}  // namespace ddp::loop
