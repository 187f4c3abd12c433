#pragma once
// The start of a training program's main, shared by ddp-train and ddp-text:
// joining the process group and choosing the threads. What comes between
// (parsing, loading the data) and after (run_training) is the program's.

#include <memory>
#include <ostream>

#include "ddp/loop/train_options.h"

namespace ddp::worker {
class ProcessGroup;
}

namespace ddp::loop {

// Joins the process group described by the torchrun environment; without a
// launcher the program runs as one process, as `python train.py` runs a
// torchrun script, and says so on `out`. A partial torchrun environment is
// still an error naming every missing variable.
std::shared_ptr<ddp::worker::ProcessGroup> join_process_group(const TrainOptions& o, int argc, char** argv,
                                                              std::ostream& out);

// Intra-op threads: --num_threads when given; else, when OMP_NUM_THREADS
// is unset, the cores split between the local workers (torchrun sets
// OMP_NUM_THREADS=1 for several workers per node; letting every worker take
// all cores oversubscribes and slows everyone).
void configure_threads(const TrainOptions& o, int local_world_size);

}  // namespace ddp::loop
