#pragma once
// What was asked, resolved once: the options, the worker command, the worker
// count and what main decided before any worker starts (app/resolve.h). The
// supervisor runs it; nothing changes it after.

#include "ddp/launcher/config/command.h"
#include "ddp/launcher/config/options.h"

#include <string>
#include <vector>

namespace ddp::launcher {

struct LaunchPlan {
  LaunchOptions opts;
  WorkerCommand command;
  EnvMap parent_env;
  int nproc = 1;
  int omp_threads = 0;  // 0: leave OMP_NUM_THREADS alone
  // <log_dir>/<run_id>_XXXXXX made by make_run_log_dir() when log options
  // are given; "" otherwise (error files then live in the private run
  // directory and workers write straight to the launcher's stdout/stderr).
  std::string run_log_dir;
  // --numa_binding: the CPUs of each worker of this launcher, by local rank
  // (numa_binding.h); empty: workers keep the launcher's affinity.
  std::vector<std::vector<int>> cpu_binding;
};

}  // namespace ddp::launcher
