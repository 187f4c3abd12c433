#pragma once
// The environment of one worker: the launcher's own environment plus
// torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, ..., TORCHELASTIC_*).
// Pure: no process, no file system, so tests check every variable directly.

#include "ddp/launcher/options.h"

#include <optional>
#include <string>

namespace ddp::launcher {

struct GroupSpec {
  const LaunchOptions* opts = nullptr;
  int nproc = 1;             // resolved --nproc_per_node
  int master_port = 29500;   // resolved (free port with --standalone)
  int restart_count = 0;     // attempt number, 0 first
  int omp_threads = 0;       // 0: leave OMP_NUM_THREADS alone
};

// The one place the OMP_NUM_THREADS default is computed (main prints it,
// worker_environment applies it through GroupSpec::omp_threads): when the
// parent has none (or an empty one), max(1, cpus / nproc); torchrun forces 1,
// which starves CPU training. nullopt when already set.
std::optional<int> default_omp_threads(const EnvMap& parent, int cpus, int nproc);

// error_file: this worker's TORCHELASTIC_ERROR_FILE.
EnvMap worker_environment(const EnvMap& parent, const GroupSpec& group, int local_rank,
                          const std::string& error_file);

}  // namespace ddp::launcher
