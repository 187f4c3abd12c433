// ddp-train: the main job. Reads its options, loads Fashion-MNIST, joins the
// process group from the torchrun environment (or runs as a single process
// when there is none) and trains with the shared loop (trainer.h) on
// FashionTask (fashion_task.h).
//   ddp-launch --nproc_per_node=2 build/bin/ddp-train [options]
// Exit codes: 0 done, 2 usage error (one line), 1 any other error (one line
// from run_main, plus the torchelastic error file for the launcher).
#include <iostream>
#include <unistd.h>

#include "ddp/train/fashion_task.h"
#include "ddp/train/program_setup.h"
#include "ddp/train/train_options.h"
#include "ddp/train/trainer.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/run_main.h"

namespace {

using namespace ddp::train;

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
  auto pg = join_process_group(opts, argc, argv, std::cout);
  configure_threads(opts, pg->local_world_size());
  FashionTask task(data);
  run_training(opts, pg, task, std::cout, pg->rank() == 0 && ::isatty(STDOUT_FILENO));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddp::worker::run_main(argc, argv, train_main); }
