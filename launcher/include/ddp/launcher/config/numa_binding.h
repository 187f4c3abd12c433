#pragma once
// --numa_binding {node,socket,exclusive,core-complex}: the CPUs each worker
// is bound to, by torch/numa/binding.py's rules (torchrun 2.x), computed
// from sysfs without LibTorch: the worker with local rank N uses GPU N (as
// the launcher sees them), whose NUMA node is
// <sysfs>/bus/pci/devices/<domain:bus:device.0>/numa_node (-1 means 0), and
//  - node: the node's CPUs (<sysfs>/devices/system/node/nodeK/cpulist);
//  - socket: the CPUs of every node on the same socket (physical_package_id
//    of each node's first CPU; nodes from node/possible);
//  - exclusive: the node's physical cores (thread_siblings_list) shared out
//    evenly among the node's GPUs in index order, the first ones one extra;
//  - core-complex: one group of CPUs sharing the last-level cache (the
//    highest Data/Unified index*/ under cpuK/cache), the biggest first, one
//    per GPU of the node, round robin.
// Always within the launcher's own affinity mask. The sysfs root and the GPU
// list are inputs, so tests use a fake tree. Computed once before any worker
// starts; spawn applies it with sched_setaffinity between fork and exec
// (torchrun execs through `numactl --physcpubind`, the same CPU binding).
// Every problem is a UsageError naming the mode and the file or GPU.

#include <set>
#include <string>
#include <vector>

namespace ddp::launcher {

struct NumaInputs {
  std::string sysfs_root = "/sys";
  std::vector<std::string> gpu_pci_ids;  // in CUDA order, as cuDeviceGetPCIBusId gives them ("0000:3B:00.0")
  std::set<int> allowed_cpus;            // the launcher's affinity mask
};

// The real inputs: /sys, the GPUs libcuda sees (CUDA_VISIBLE_DEVICES
// applied; none without a driver), sched_getaffinity.
NumaInputs probe_numa_inputs();

// The CPUs for each of `local_ranks` (the GPU index of each); `what` names
// the option as given ("--numa-binding node"). Throws UsageError.
std::vector<std::set<int>> numa_cpu_bindings(const std::string& mode, const std::string& what,
                                             const std::vector<int>& local_ranks, const NumaInputs& in);

// sysfs lists: "0-3,8,10-11" (blanks and a trailing newline ignored).
// Throws UsageError naming `what` on anything else.
std::set<int> parse_cpu_list(const std::string& text, const std::string& what);
// The reverse, "0-3,8,10-11", as numactl is given it.
std::string format_cpu_list(const std::set<int>& cpus);

}  // namespace ddp::launcher
