#include "ddp/launcher/config/worker_env.h"

#include "ddp/common/heartbeat.h"
#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/config/flight_recorder_env.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace ddp::launcher {

std::optional<int> default_omp_threads(const EnvMap& parent, int cpus, int nproc) {
  // Empty counts as unset, as OpenMP (and ddp-train) read it.
  if (auto it = parent.find("OMP_NUM_THREADS"); it != parent.end() && !it->second.empty()) return std::nullopt;
  return std::max(1, cpus / std::max(1, nproc));
}

NodePlacement static_placement(const LaunchOptions& o, int nproc) {
  // Ranks are ints (RANK, WORLD_SIZE, c10d's world size): both bounds are
  // checked options, their product is not.
  const long long world = static_cast<long long>(o.nnodes) * nproc;
  if (world > std::numeric_limits<int>::max())
    throw UsageError(std::to_string(o.nnodes) + " nodes x " + std::to_string(nproc) + " workers per node = " +
                     std::to_string(world) + " ranks, more than a job can have (" +
                     std::to_string(std::numeric_limits<int>::max()) + "); lower --nnodes or --nproc_per_node");
  NodePlacement p;
  p.group_rank = o.node_rank;
  p.group_world_size = o.nnodes;
  p.base_rank = o.node_rank * nproc;  // node_rank < nnodes: fits
  p.world_size = static_cast<int>(world);
  p.master_addr = o.master_addr;
  return p;
}

std::string virtual_visible_device(const EnvMap& parent, int local_rank, int nproc) {
  auto it = parent.find("CUDA_VISIBLE_DEVICES");
  if (it == parent.end()) return std::to_string(local_rank);  // no restriction: GPU N for local rank N
  std::vector<std::string> gpus;
  size_t start = 0;
  for (;;) {
    const size_t comma = it->second.find(',', start);
    gpus.push_back(it->second.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (local_rank >= static_cast<int>(gpus.size()))
    throw UsageError("--virtual_local_rank: local rank " + std::to_string(local_rank) + " has no GPU in CUDA_VISIBLE_DEVICES=" +
                     it->second + " (" + std::to_string(gpus.size()) + " listed); give --nproc_per_node " +
                     std::to_string(gpus.size()) + " or less, or list " + std::to_string(nproc) + " GPUs");
  std::string& g = gpus[static_cast<size_t>(local_rank)];
  const auto b = g.find_first_not_of(" \t\n");
  return b == std::string::npos ? "" : g.substr(b, g.find_last_not_of(" \t\n") - b + 1);
}

EnvMap worker_environment(const EnvMap& parent, const GroupSpec& g, int local_rank,
                          const std::string& error_file, const std::string& heartbeat_file) {
  const LaunchOptions& o = *g.opts;
  const NodePlacement p = g.placement ? *g.placement : static_placement(o, g.nproc);
  const int world = p.world_size;
  const int rank = p.base_rank + local_rank;
  EnvMap env = parent;
  auto set = [&](const char* k, const std::string& v) { env[k] = v; };
  auto seti = [&](const char* k, long long v) { env[k] = std::to_string(v); };
  seti("RANK", rank);
  seti("LOCAL_RANK", local_rank);
  seti("WORLD_SIZE", world);
  seti("LOCAL_WORLD_SIZE", g.nproc);
  seti("GROUP_RANK", p.group_rank);
  seti("GROUP_WORLD_SIZE", p.group_world_size);
  seti("ROLE_RANK", rank);
  set("ROLE_NAME", o.role);
  seti("ROLE_WORLD_SIZE", world);
  set("MASTER_ADDR", p.master_addr);
  seti("MASTER_PORT", g.master_port);
  seti("TORCHELASTIC_RESTART_COUNT", g.restart_count);
  seti("TORCHELASTIC_MAX_RESTARTS", o.max_restarts);
  set("TORCHELASTIC_RUN_ID", o.run_id);
  // True: the launcher hosts the workers' store at MASTER_ADDR:PORT
  // (workers_store.h: a single node's static run, or the c10d round's node
  // rank 0, a fresh store per round). False: the workers' rank 0 hosts it
  // (a static run of several nodes, srun-per-rank tasks).
  set("TORCHELASTIC_USE_AGENT_STORE", g.agent_store ? "True" : "False");
  set("TORCHELASTIC_ERROR_FILE", error_file);
  // --recovery in_place with restarts to spend, on the launcher's store (a
  // single node's static run, or a c10d round's: the generation is then the
  // job's, job_recovery.h): the runtime's loop keeps each step's start in memory and
  // advertises in-place recovery on its page (docs/worker-runtime.md). Else
  // it must not: the parent's value is dropped.
  if (o.recovery_in_place && o.max_restarts > 0 && g.agent_store) set("DDP_RECOVERY", "in_place");
  else env.erase("DDP_RECOVERY");
  // How long a survivor whose collective failed waits for the new
  // generation (the runtime's default: 5 s, for a lost process, which its
  // launcher sees at once). A node lost whole that a hot spare replaces is
  // noticed by the keep-alive ring (keep_alive_interval *
  // keep_alive_max_attempt), the takeover heard at the next tick (an
  // interval, a second at least, for the spare's read), plus 5 s.
  if (env.count("DDP_RECOVERY") && o.rdzv.elastic() && o.rdzv.hot_spares > 0) {
    const double i = o.rdzv.keep_alive_interval_s;
    set("DDP_RECOVERY_WAIT_S", fixed_text(i * o.rdzv.keep_alive_max_attempt + 2 * std::max(1.0, i) + 5, 1));
  } else {
    env.erase("DDP_RECOVERY_WAIT_S");
  }
  // Only a respawn sets it, and a hot spare's takeover for all its workers.
  if (g.recovery_generation > 0 && env.count("DDP_RECOVERY")) seti("DDP_RECOVERY_GENERATION", static_cast<long long>(g.recovery_generation));
  else env.erase("DDP_RECOVERY_GENERATION");
  if (heartbeat_file.empty()) env.erase(Heartbeat::kEnvVar);
  else set(Heartbeat::kEnvVar, heartbeat_file);
  // torchrun 2.x sets TORCH_NCCL_ASYNC_ERROR_HANDLING, 1.13 the name its
  // LibTorch reads, NCCL_ASYNC_ERROR_HANDLING (each: the parent's value, else
  // 1). Both, in every mode: without the old name an NCCL worker of LibTorch
  // 1.x hangs on a failed peer instead of failing; LibTorch 2.x reads both
  // (the new one wins) and warns once that the old name is deprecated. A
  // parent's value of either name serves the other name too.
  {
    auto t = parent.find("TORCH_NCCL_ASYNC_ERROR_HANDLING"), old = parent.find("NCCL_ASYNC_ERROR_HANDLING");
    const std::string v = t != parent.end() ? t->second : old != parent.end() ? old->second : "1";
    if (t == parent.end()) set("TORCH_NCCL_ASYNC_ERROR_HANDLING", v);
    if (old == parent.end()) set("NCCL_ASYNC_ERROR_HANDLING", v);
  }
  // The signals the launcher forwards to its workers (--signals_to_handle),
  // as torchrun 2.x tells its workers: always its own list, never the parent's.
  set("TORCHELASTIC_SIGNALS_TO_HANDLE", signal_list_text(o.signals_to_handle));
  if (g.omp_threads > 0) seti("OMP_NUM_THREADS", g.omp_threads);
  // PyTorch's flight recorder writes into the run, unless the parent said where.
  set_flight_recorder_env(env, parent, g.fr_dump_prefix);
  // torchrun's file timer (file_timer_server.h): the pipe FileTimerClient writes to.
  if (!g.timer_file.empty()) set("TORCHELASTIC_TIMER_FILE", g.timer_file);
  if (o.task) {  // srun-per-rank mode (slurm.h): RANK and WORLD_SIZE are right already
    seti("LOCAL_RANK", o.task->local_rank);
    seti("LOCAL_WORLD_SIZE", o.task->local_world_size);
    seti("GROUP_RANK", o.task->group_rank);
    seti("GROUP_WORLD_SIZE", o.task->group_world_size);
  }
  if (o.virtual_local_rank) {
    const int lr = o.task ? o.task->local_rank : local_rank;
    set("LOCAL_RANK", "0");
    set("CUDA_VISIBLE_DEVICES", virtual_visible_device(parent, lr, o.task ? lr + 1 : g.nproc));
  }
  return env;
}

}  // namespace ddp::launcher
