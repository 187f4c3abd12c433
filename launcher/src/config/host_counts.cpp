#include "ddp/launcher/config/options.h"

#include "ddp/common/parse.h"

#include <algorithm>
#include <dlfcn.h>
#include <sched.h>
#include <thread>

namespace ddp::launcher {

HostCounts probe_host(bool with_gpus) {
  HostCounts h;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) h.cpus = std::max(1, CPU_COUNT(&set));
  else h.cpus = std::max(1u, std::thread::hardware_concurrency());

  // The CUDA driver API answers with CUDA_VISIBLE_DEVICES applied, without
  // LibTorch or the runtime. No driver means no GPU.
  if (!with_gpus) return h;
  if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    using InitFn = int (*)(unsigned);
    using CountFn = int (*)(int*);
    auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
    int n = 0;
    if (init && count && init(0) == 0 && count(&n) == 0) h.gpus = n;
    ::dlclose(lib);
  }
  return h;
}

int resolve_nproc(const std::string& spec, const HostCounts& host) {
  if (spec == "cpu") return host.cpus;
  if (spec == "gpu") {
    if (host.gpus <= 0)
      throw UsageError("--nproc_per_node gpu: no NVIDIA GPU is visible (no CUDA driver, or "
                       "CUDA_VISIBLE_DEVICES hides them); give a number or use cpu");
    return host.gpus;
  }
  if (spec == "auto") return host.gpus > 0 ? host.gpus : host.cpus;
  return static_cast<int>(usage_checked([&] { return parse_int(spec, "--nproc_per_node", 1, kMaxWorkers); }));
}

}  // namespace ddp::launcher
