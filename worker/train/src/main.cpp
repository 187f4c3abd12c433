// ddp-train: the main job. Reads its options, loads Fashion-MNIST, joins the
// process group from the torchrun environment (or runs as a single process
// when there is none) and trains (trainer.h).
//   ddp-launch --nproc_per_node=2 build/bin/ddp-train [options]
// Exit codes: 0 done, 2 usage error (one line), 1 any other error (one line
// from run_main, plus the torchelastic error file for the launcher).
#include <ATen/Parallel.h>

#include <algorithm>
#include <iostream>
#include <thread>
#include <unistd.h>

#include "ddp/train/fashion_task.h"
#include "ddp/train/train_options.h"
#include "ddp/train/trainer.h"
#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/run_main.h"

namespace {

using namespace ddp::train;

// torchrun sets OMP_NUM_THREADS=1 for several workers per node; when nobody
// chose, split the cores between the local workers instead of letting every
// worker take all of them (which oversubscribes and slows everyone).
void configure_threads(const TrainOptions& o, int local_world_size) {
  if (o.num_threads > 0) {
    at::set_num_threads(o.num_threads);
  } else if (!o.omp_threads_set) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / std::max(1, local_world_size)));
  }
}

int train_main(int argc, char** argv) {
  TrainOptions opts;
  try {
    opts = parse_train_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::cerr << "ddp-train: error: " << e.what() << " (see ddp-train --help)" << std::endl;
    return 2;
  }
  if (opts.help) {
    std::cout << train_usage();
    return 0;
  }

  // Data first: a missing package is reported before any rendezvous wait.
  const FashionMnist data = load_fashion_mnist(opts.data_dir);

  // Without a launcher ddp-train runs as one process, as `python train.py`
  // runs a torchrun script; a partial torchrun environment is still an error
  // naming every missing variable.
  const bool launched = ddp::worker::DistEnv::launched();
  if (!launched)
    std::cout << "ddp-train: no torchrun environment (RANK, WORLD_SIZE, ... unset): training as a single "
                 "process; for several, start it with ddp-launch --nproc_per_node=N"
              << std::endl;
  ddp::worker::InitOptions init;
  init.device = opts.device;
  auto pg = launched ? ddp::worker::init_process_group(init, argc, argv)
                     : ddp::worker::init_process_group(ddp::worker::DistEnv::single_process(), init);
  configure_threads(opts, pg->local_world_size());
  FashionTask task(data);
  run_training(opts, pg, task, std::cout, pg->rank() == 0 && ::isatty(STDOUT_FILENO));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddp::worker::run_main(argc, argv, train_main); }
