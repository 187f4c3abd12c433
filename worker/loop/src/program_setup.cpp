#include "ddp/loop/program_setup.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <thread>

#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"

namespace ddp::loop {

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

void configure_threads(const TrainOptions& o, int local_world_size) {
  if (o.num_threads > 0) {
    at::set_num_threads(o.num_threads);
  } else if (!o.omp_threads_set) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(std::max(1, cores / std::max(1, local_world_size)));
  }
}

}  // namespace ddp::loop
