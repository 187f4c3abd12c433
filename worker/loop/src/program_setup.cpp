#include "ddp/loop/program_setup.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <iostream>
#include <thread>
#include <vector>

#include "ddp/worker/collectives.h"
#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/recovery.h"

namespace ddp::loop {
namespace {

// Joins the process group described by the torchrun environment; without a
// launcher the program runs as one process, as `python train.py` runs a
// torchrun script, and says so on `out`. A partial torchrun environment is
// still an error naming every missing variable.
std::shared_ptr<ddp::worker::ProcessGroup> join_process_group(const TrainOptions& o, int argc, char** argv,
                                                              std::ostream& out) {
  const bool launched = ddp::worker::DistEnv::launched();
  if (!launched)
    out << o.program << ": no torchrun environment (RANK, WORLD_SIZE, ... unset): training as a single "
        << "process; for several, start it with ddp-launch --nproc_per_node=N" << std::endl;
  ddp::worker::InitOptions init;
  init.device = o.device;
  return launched ? ddp::worker::init_process_group(init, argc, argv)
                  : ddp::worker::init_process_group(ddp::worker::DistEnv::single_process(), init);
}

// Intra-op threads: --num_threads when given; else, when OMP_NUM_THREADS
// is unset, the cores split between the local workers (torchrun sets
// OMP_NUM_THREADS=1 for several workers per node; letting every worker take
// all cores oversubscribes and slows everyone).
void configure_threads(const TrainOptions& o, int local_world_size) {
  if (o.num_threads > 0) {
    at::set_num_threads(o.num_threads);
  } else if (!o.omp_threads_set) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / std::max(1, local_world_size)));
  }
}

// Loads the data (spec.setup), then joins the group; a rank brought back
// by an in-place recovery (DDP_RECOVERY_GENERATION) does both at once: the
// survivors wait for it, and the join is mostly waiting for their answers.
// Its data set was read once already, in its first life, so the reason for
// the order (a missing data set said before any rendezvous wait) is gone.
// The join stays on this thread (it binds the thread to its GPU); the load
// runs beside it, and an error of either is the error it would be alone.
template <typename Join>
TrainingTask& setup_and_join(const ProgramSpec& spec, const TrainOptions& opts, const Join& join, bool returning,
                             std::shared_ptr<ddp::worker::ProcessGroup>& pg) {
  if (!returning) {
    TrainingTask& task = spec.setup(opts);
    pg = join();
    return task;
  }
  std::future<TrainingTask*> loaded = std::async(std::launch::async, [&] { return &spec.setup(opts); });
  try {
    pg = join();
  } catch (...) {
    loaded.wait();  // the load uses opts and the program's state: done before they go
    throw;
  }
  return *loaded.get();
}

}  // namespace

int run_program(int argc, char** argv, const ProgramSpec& spec, const LoopHooks& hooks,
                const ProgramContext& context) {
  std::ostream& out = context.out ? *context.out : std::cout;
  std::ostream& err = context.err ? *context.err : std::cerr;
  const std::string& program = spec.options.defaults.program;
  TrainOptions opts;
  try {
    opts = parse_train_options(std::vector<std::string>(argv + 1, argv + argc), {}, spec.options);
  } catch (const UsageError& e) {
    err << program << ": error: " << e.what() << " (see " << program << " --help)" << std::endl;
    return 2;
  }
  if (opts.help) {
    out << spec.usage;
    return 0;
  }
  if (spec.identity) opts.program_identity = spec.identity();

  const auto join = [&] {
    return context.join ? context.join(opts) : join_process_group(opts, argc, argv, out);
  };
  std::shared_ptr<ddp::worker::ProcessGroup> pg;
  if (spec.prepare_data) {
    // Rank 0 prepares (the others would race on the same files) and every
    // rank learns whether it worked and whether to go on; then each loads.
    // A rank brought back in place skips it: the survivors prepared and
    // went on long ago, and they wait for it in the recovery's exchange,
    // not in this collective (which would hold both until the launcher's
    // recovery timeout).
    pg = join();
    const bool returning = ddp::worker::recovery_possible(*pg) && ddp::worker::recovery_generation_at_start() > 0;
    const bool go_on =
        returning || ddp::worker::rank0_decides_int(*pg, [&] { return spec.prepare_data(opts, out) ? 1 : 0; }) != 0;
    if (!go_on) return 0;
  }
  const bool returning =
      !pg && !context.join && ddp::worker::DistEnv::launched() && ddp::worker::recovery_generation_at_start() > 0;
  TrainingTask& task = pg ? spec.setup(opts) : setup_and_join(spec, opts, join, returning, pg);
  configure_threads(opts, pg->local_world_size());
  // A progress bar only on a terminal: rank 0's, when it writes to stdout.
  const bool tty = pg->rank() == 0 && &out == &std::cout && ::isatty(STDOUT_FILENO);
  run_training(opts, pg, task, out, tty, hooks);
  return 0;
}

}  // namespace ddp::loop
