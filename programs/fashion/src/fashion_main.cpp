#include "ddp/fashion/fashion_main.h"

#include <iostream>
#include <unistd.h>

#include "ddp/fashion/fashion_options.h"
#include "ddp/fashion/fashion_task.h"
#include "ddp/loop/program_setup.h"
#include "ddp/worker/process_group.h"

namespace ddp::fashion {

int fashion_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks) {
  using namespace ddp::loop;
  TrainOptions opts;
  try {
    opts = parse_train_options(std::vector<std::string>(argv + 1, argv + argc), {}, fashion_program_options());
  } catch (const UsageError& e) {
    std::cerr << "ddp-train: error: " << e.what() << " (see ddp-train --help)" << std::endl;
    return 2;
  }
  if (opts.help) {
    std::cout << fashion_usage();
    return 0;
  }

  // Data first: a missing package is reported before any rendezvous wait.
  const FashionMnist data = load_fashion_mnist(opts.data_dir);
  auto pg = join_process_group(opts, argc, argv, std::cout);
  configure_threads(opts, pg->local_world_size());
  FashionTask task(data);
  run_training(opts, pg, task, std::cout, pg->rank() == 0 && ::isatty(STDOUT_FILENO), hooks);
  return 0;
}

}  // namespace ddp::fashion
