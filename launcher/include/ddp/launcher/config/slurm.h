#pragma once
// Slurm: what ddp-launch takes from an allocation (SLURM_JOB_ID set) when the
// user did not say it. Pure functions of the environment map; no scontrol,
// no files, no processes, so tests drive them with their own maps.
//  - per node (one ddp-launch per node, `srun --ntasks-per-node=1`): nnodes
//    from SLURM_NNODES, node rank from SLURM_NODEID, master address = first
//    host of the node list (hostlist syntax expanded here), master port =
//    MASTER_PORT if set, else derived from the job id (slurm_master_port);
//  - per rank (`srun --ntasks-per-node=G ddp-launch --slurm_tasks`, or found
//    automatically, see resolve_slurm): every srun task runs exactly one
//    worker, RANK=SLURM_PROCID, LOCAL_RANK=SLURM_LOCALID, WORLD_SIZE=
//    SLURM_NTASKS, LOCAL_WORLD_SIZE from SLURM_TASKS_PER_NODE.
// The command line and PET_* always win over Slurm's values; a malformed
// SLURM_* value that would be used is a UsageError naming the variable.
// Outside an allocation nothing here changes anything.

#include "ddp/launcher/config/options.h"
#include "ddp/launcher/config/plan.h"

#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher {

// Slurm hostlist syntax: comma-separated names, each with any number of
// bracketed range lists ("gpu-a[08-10,012],cpu1", "n[1-3]-ib",
// "r[1-2]n[01-02]"). Zero-padded widths are kept (08-10 -> 08 09 10). `var`
// names the variable in errors. Throws UsageError on malformed lists or more
// than max_hosts names.
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& var,
                                         size_t max_hosts = 1 << 20);

// SLURM_TASKS_PER_NODE syntax: "2(x3),1" -> {2, 2, 2, 1}. Throws UsageError.
std::vector<int> expand_tasks_per_node(const std::string& spec, const std::string& var);

// 10000 + job_id % 20000: below Linux's ephemeral ports (32768-60999), so no
// outgoing connection holds it, and different for every two jobs whose ids
// differ by less than 20000 (Slurm numbers jobs consecutively, so jobs that
// share a node at the same time nearly always do).
int slurm_master_port(long long job_id);

// True inside an allocation (SLURM_JOB_ID set and not empty).
bool in_slurm_allocation(const EnvMap& env);

// The host counts for --nproc_per_node gpu/auto: inside an allocation the
// GPUs are SLURM_GPUS_ON_NODE (what Slurm gave this node), at most as many as
// CUDA_VISIBLE_DEVICES lists when that is set (what this process may use);
// with neither set (or outside an allocation) probe_host(with_gpus).
HostCounts probe_host_with_slurm(bool with_gpus, const EnvMap& env);

// Fills what the user left open from the allocation and decides the mode
// (call after nproc and the command are resolved, before anything starts).
// Per-rank mode applies with --slurm_tasks / PET_SLURM_TASKS, or
// automatically inside an srun step (SLURM_STEP_ID set) when SLURM_NTASKS > 1
// and SLURM_NTASKS equals nnodes * nproc_per_node; never in the batch script
// itself (no SLURM_STEP_ID: one process, though SLURM_NTASKS counts the
// allocation). In per-rank mode cfg.nproc becomes 1, opts.task is set, and
// opts.nnodes / node_rank become SLURM_NTASKS / SLURM_PROCID (each task is a
// "node" of one worker to the static rendezvous). Several launchers on one
// node in per-node mode (their ranks would collide) is a UsageError that says
// what to do. Does nothing outside an allocation or with --standalone. Ends
// with check_free_port (options.h): port 0 needs a one-node job, Slurm's too.
void resolve_slurm(LaunchPlan& cfg, const EnvMap& env);

}  // namespace ddp::launcher
