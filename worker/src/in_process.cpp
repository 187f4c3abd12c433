#include "ddp/worker/in_process.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "make_process_group.h"

namespace ddp::worker {

void run_ranks_in_process(int world_size, const std::function<void(const std::shared_ptr<ProcessGroup>&)>& body,
                          InitOptions options) {
  if (world_size < 1)
    throw std::invalid_argument("run_ranks_in_process: world size " + std::to_string(world_size) +
                                " is not a number of ranks >= 1");
  if (options.timeout == InitOptions::kDefaultTimeout) options.timeout = std::chrono::seconds(30);
  if (options.device.empty() || options.device == "auto") options.device = "cpu";
  if (options.backend.empty()) options.backend = "gloo";
  const c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world_size));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        DistEnv env;
        env.rank = r;
        env.world_size = world_size;
        env.local_rank = r;
        env.local_world_size = world_size;
        env.master_addr = "in-process";
        body(make_process_group(env, options, store));
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace ddp::worker
