#pragma once
// The environment of one worker: the launcher's own environment plus
// torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, ..., TORCHELASTIC_*).
// Pure: no process, no file system, so tests check every variable directly.

#include "ddp/launcher/config/options.h"

#include <optional>
#include <string>

namespace ddp::launcher {

// Where this node's workers sit in the job. Static rendezvous derives it from
// --node_rank/--nnodes (every node runs the same nproc); a c10d round gives it
// (nodes may run different counts; ranks follow the node ranks).
struct NodePlacement {
  int group_rank = 0;          // GROUP_RANK: this node's rank
  int group_world_size = 1;    // GROUP_WORLD_SIZE: nodes in the job
  int base_rank = 0;           // RANK of this node's local rank 0
  int world_size = 1;          // WORLD_SIZE
  std::string master_addr;     // MASTER_ADDR (MASTER_PORT is GroupSpec::master_port)
};
// Throws UsageError when nnodes * nproc ranks do not fit an int (main
// checks it before anything starts).
NodePlacement static_placement(const LaunchOptions& opts, int nproc);

struct GroupSpec {
  const LaunchOptions* opts = nullptr;
  int nproc = 1;             // resolved --nproc_per_node
  int master_port = 29500;   // resolved (free port with --standalone)
  int restart_count = 0;     // attempt number, 0 first
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE: the launcher hosts the workers' store
  int omp_threads = 0;       // 0: leave OMP_NUM_THREADS alone
  std::string fr_dump_prefix;  // this attempt's flight recorder prefix (flight_recorder.h), "" for none
  std::optional<NodePlacement> placement;  // a c10d round's; static_placement(*opts, nproc) when unset
  std::string timer_file;    // the file timer's pipe (TORCHELASTIC_TIMER_FILE), "" when not served
  // A hot spare that took a lost node's place in the running c10d round:
  // every worker starts as a returning rank (DDP_RECOVERY_GENERATION); 0 none.
  uint64_t recovery_generation = 0;
};

// The one place the OMP_NUM_THREADS default is computed (main prints it,
// worker_environment applies it through GroupSpec::omp_threads): when the
// parent has none (or an empty one), max(1, cpus / nproc); torchrun forces 1,
// which starves CPU training. nullopt when already set.
std::optional<int> default_omp_threads(const EnvMap& parent, int cpus, int nproc);

// --virtual_local_rank (torchrun 2.x's rule): the CUDA_VISIBLE_DEVICES of the
// worker with this local rank, the parent's entry at that index (blanks
// stripped), or the index itself when the parent has none. Throws UsageError
// when the parent's list is shorter than nproc; main checks the highest
// local rank before any worker starts.
std::string virtual_visible_device(const EnvMap& parent, int local_rank, int nproc);

// error_file: this worker's TORCHELASTIC_ERROR_FILE; heartbeat_file: its
// DDP_HEARTBEAT_FILE (heartbeat.h), "" for none (an inherited one is then
// removed: it is another launcher's worker's page). With
// --virtual_local_rank, LOCAL_RANK is 0 and CUDA_VISIBLE_DEVICES is
// virtual_visible_device() (in srun-per-rank mode, of srun's local id).
EnvMap worker_environment(const EnvMap& parent, const GroupSpec& group, int local_rank,
                          const std::string& error_file, const std::string& heartbeat_file = "");

}  // namespace ddp::launcher
