// The helper's memory mode: page faults of a training step's allocations
// under the runtime's malloc settings.
#include <torch/torch.h>

#include <sys/resource.h>
#include <iostream>
#include <vector>

#include "ddp/worker/malloc_tuning.h"
#include "helper.h"

using namespace ddp::worker;

namespace worker_helper {

// alloc-faults: a training step's allocation pattern (several multi-MiB
// tensors alive together, then all freed) repeated; prints the minor page
// faults per step after a warm-up, and the malloc settings in force.
int alloc_faults(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int steps = std::stoi(arg(kv, "steps", "20"));
  auto step = [] {
    std::vector<torch::Tensor> alive;
    for (std::int64_t mib : {6, 3, 3, 2, 2, 1, 6, 3}) alive.push_back(torch::ones({mib << 18}));  // float32
    float sum = 0;
    for (auto& t : alive) sum += t[0].item<float>();
    return sum;
  };
  for (int i = 0; i < 10; ++i) step();  // warm-up: the heap reaches its size
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  for (int i = 0; i < steps; ++i) step();
  ::getrusage(RUSAGE_SELF, &after);
  const auto& t = malloc_tuning();
  std::cout << "minor faults per step " << (after.ru_minflt - before.ru_minflt) / steps << "\n"
            << "malloc tuning " << (t.applied ? "applied" : "skipped: " + t.skipped_because) << std::endl;
  return 0;
}

}  // namespace worker_helper
