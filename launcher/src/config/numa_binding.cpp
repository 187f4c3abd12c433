#include "ddp/launcher/config/numa_binding.h"

#include "ddp/launcher/config/options.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fstream>
#include <map>
#include <sched.h>
#include <sstream>

namespace ddp::launcher {

namespace {

class Topology {
 public:
  Topology(const std::string& mode, const std::string& what, const NumaInputs& in) : mode_(mode), what_(what), in_(in) {}

  std::string read(const std::string& rel) const {
    const std::string path = in_.sysfs_root + "/" + rel;
    std::ifstream f(path);
    std::ostringstream s;
    if (f) s << f.rdbuf();
    if (!f)
      throw UsageError(what_ + ": cannot read " + path + " (" + std::strerror(errno) +
                       "); this machine does not describe its NUMA layout there, drop --numa_binding");
    return s.str();
  }
  std::set<int> read_list(const std::string& rel) const {
    return parse_cpu_list(read(rel), in_.sysfs_root + "/" + rel);
  }
  int read_int(const std::string& rel) const {
    const std::string t = read(rel);
    try {
      size_t used = 0;
      const int v = std::stoi(t, &used);
      if (t.find_first_not_of(" \n", used) == std::string::npos) return v;
    } catch (const std::exception&) {
    }
    throw UsageError(what_ + ": " + in_.sysfs_root + "/" + rel + " holds '" + t +
                     "', not a number");
  }

  // torch formats the address from the device's PCI domain, bus and device.
  std::string sysfs_pci_address(int gpu) const {
    const std::string& id = in_.gpu_pci_ids.at(static_cast<size_t>(gpu));
    unsigned domain = 0, bus = 0, device = 0;
    if (std::sscanf(id.c_str(), "%x:%x:%x", &domain, &bus, &device) != 3)
      throw UsageError(what_ + ": GPU " + std::to_string(gpu) + " has the PCI bus id '" + id +
                       "', not DOMAIN:BUS:DEVICE.FUNCTION");
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.0", domain, bus, device);
    return buf;
  }

  int node_of_gpu(int gpu) const {
    // -1: one NUMA node (or firmware that does not say), which is node 0.
    return std::max(0, read_int("bus/pci/devices/" + sysfs_pci_address(gpu) + "/numa_node"));
  }

  std::set<int> allowed_cpus_of_node(int node) const {
    std::set<int> out;
    for (int c : read_list("devices/system/node/node" + std::to_string(node) + "/cpulist"))
      if (in_.allowed_cpus.count(c)) out.insert(c);
    return out;
  }

  std::vector<int> gpus_on_node(int node) const {
    std::vector<int> out;
    for (int g = 0; g < static_cast<int>(in_.gpu_pci_ids.size()); ++g)
      if (node_of_gpu(g) == node) out.push_back(g);
    return out;
  }

  int socket_of_cpu(int cpu) const {
    return read_int("devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/physical_package_id");
  }

  // CPUs sharing the last-level data cache with `cpu`.
  std::set<int> last_level_cache_of(int cpu) const {
    const std::string rel = "devices/system/cpu/cpu" + std::to_string(cpu) + "/cache";
    const std::string dir = in_.sysfs_root + "/" + rel;
    DIR* d = ::opendir(dir.c_str());
    if (!d)
      throw UsageError(what_ + ": cannot read " + dir + " (" + std::strerror(errno) +
                       "); core-complex needs the cache layout, use node instead");
    std::vector<std::string> entries;
    while (dirent* e = ::readdir(d)) entries.push_back(e->d_name);
    ::closedir(d);
    std::sort(entries.begin(), entries.end());
    int max_level = -1;
    std::set<int> out;
    for (const std::string& name : entries) {
      if (name.rfind("index", 0) != 0 || name.size() == 5 ||
          name.find_first_not_of("0123456789", 5) != std::string::npos)
        continue;
      std::string type = read(rel + "/" + name + "/type");
      type.erase(type.find_last_not_of(" \n") + 1);
      if (type != "Unified" && type != "Data") continue;
      const int level = read_int(rel + "/" + name + "/level");
      if (level <= max_level) continue;
      max_level = level;
      out = read_list(rel + "/" + name + "/shared_cpu_list");
    }
    return out;
  }

  std::set<int> bind(int gpu) const {
    if (gpu >= static_cast<int>(in_.gpu_pci_ids.size()))
      throw UsageError(what_ + ": local rank " + std::to_string(gpu) + " has no GPU (" +
                       std::to_string(in_.gpu_pci_ids.size()) +
                       " visible); give --nproc_per_node gpu, or drop --numa_binding");
    const int node = node_of_gpu(gpu);
    std::set<int> cpus;
    if (mode_ == "node") {
      cpus = allowed_cpus_of_node(node);
    } else if (mode_ == "socket") {
      cpus = socket_cpus(node);
    } else if (mode_ == "exclusive") {
      cpus = exclusive_cpus(node, gpu);
    } else {
      cpus = core_complex_cpus(node, gpu);
    }
    if (cpus.empty())
      throw UsageError(what_ + ": no CPU of NUMA node " + std::to_string(node) + " (GPU " +
                       std::to_string(gpu) + "'s) is in the launcher's affinity mask; widen it (taskset, cgroup "
                       "cpuset) or drop --numa_binding");
    return cpus;
  }

 private:
  std::set<int> socket_cpus(int node) const {
    const std::set<int> own = allowed_cpus_of_node(node);
    if (own.empty()) return own;
    const int socket = socket_of_cpu(*own.begin());
    std::set<int> out;
    for (int n : read_list("devices/system/node/possible")) {
      const std::set<int> cpus = n == node ? own : allowed_cpus_of_node(n);
      // A node without CPUs we may use (memory only) is on no socket we can bind to.
      if (!cpus.empty() && socket_of_cpu(*cpus.begin()) == socket) out.insert(cpus.begin(), cpus.end());
    }
    return out;
  }

  size_t relative_index(int node, int gpu) const {
    const std::vector<int> gpus = gpus_on_node(node);
    return static_cast<size_t>(std::find(gpus.begin(), gpus.end(), gpu) - gpus.begin());
  }

  std::set<int> exclusive_cpus(int node, int gpu) const {
    const std::vector<int> gpus = gpus_on_node(node);
    const size_t index = relative_index(node, gpu);
    // Physical cores, each named by its lowest sibling, in that order.
    std::map<int, std::set<int>> cores;
    for (int c : allowed_cpus_of_node(node)) {
      const std::set<int> sib = read_list("devices/system/cpu/cpu" + std::to_string(c) + "/topology/thread_siblings_list");
      cores[sib.empty() ? c : *sib.begin()].insert(c);
    }
    const size_t per_gpu = cores.size() / gpus.size();
    const size_t extra = cores.size() % gpus.size();  // the lowest GPU indices get one more core
    if (per_gpu < 1)
      throw UsageError(what_ + ": NUMA node " + std::to_string(node) + " has " +
                       std::to_string(cores.size()) + " physical cores for " + std::to_string(gpus.size()) +
                       " GPUs; use node or socket");
    const size_t start = index * per_gpu + std::min(index, extra);
    const size_t end = start + per_gpu + (index < extra ? 1 : 0);
    std::set<int> out;
    size_t i = 0;
    for (const auto& [core, cpus] : cores) {
      if (i >= start && i < end) out.insert(cpus.begin(), cpus.end());
      ++i;
    }
    return out;
  }

  std::set<int> core_complex_cpus(int node, int gpu) const {
    const size_t index = relative_index(node, gpu);
    std::map<int, std::set<int>> caches;  // named by their lowest CPU
    for (int c : allowed_cpus_of_node(node)) {
      const std::set<int> shared = last_level_cache_of(c);
      caches[shared.empty() ? c : *shared.begin()].insert(c);
    }
    std::vector<std::pair<int, std::set<int>>> order(caches.begin(), caches.end());
    // Caches with more usable CPUs first, then the lower ones.
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
    if (order.empty()) return {};
    return order[index % order.size()].second;
  }

  std::string mode_;
  std::string what_;  // the option as given, for messages
  const NumaInputs& in_;
};

}  // namespace

std::set<int> parse_cpu_list(const std::string& text, const std::string& what) {
  std::set<int> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \n\t"));
    item.erase(item.find_last_not_of(" \n\t") + 1);
    if (item.empty()) continue;
    unsigned lo = 0, hi = 0;
    char tail = 0;
    const int n = std::sscanf(item.c_str(), "%u-%u%c", &lo, &hi, &tail);
    if (n == 1 && item.find('-') == std::string::npos && item.find_first_not_of("0123456789") == std::string::npos) {
      hi = lo;
    } else if (n != 2 || hi < lo || item.find_first_not_of("0123456789-") != std::string::npos) {
      throw UsageError(what + ": '" + text + "' is not a CPU list like 0-3,8");
    }
    if (hi > (1u << 20)) throw UsageError(what + ": '" + text + "' names CPU " + std::to_string(hi));
    for (unsigned c = lo; c <= hi; ++c) out.insert(static_cast<int>(c));
  }
  return out;
}

std::string format_cpu_list(const std::set<int>& cpus) {
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int start = *it;
    int end = start;
    while (++it != cpus.end() && *it == end + 1) ++end;
    out += (out.empty() ? "" : ",") + std::to_string(start) + (end == start ? "" : "-" + std::to_string(end));
  }
  return out;
}

std::vector<std::set<int>> numa_cpu_bindings(const std::string& mode, const std::string& what,
                                             const std::vector<int>& local_ranks, const NumaInputs& in) {
  if (in.gpu_pci_ids.empty())
    throw UsageError(what + ": no NVIDIA GPU is visible (no CUDA driver, or CUDA_VISIBLE_DEVICES "
                     "hides them); it binds each worker to the CPUs near its GPU, drop it on a machine without GPUs");
  const Topology topo(mode, what, in);
  std::vector<std::set<int>> out;
  for (int lr : local_ranks) out.push_back(topo.bind(lr));
  return out;
}

NumaInputs probe_numa_inputs() {
  NumaInputs in;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) in.allowed_cpus.insert(c);
  // The driver API answers with CUDA_VISIBLE_DEVICES applied, as torch.cuda does.
  if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    using InitFn = int (*)(unsigned);
    using CountFn = int (*)(int*);
    using GetFn = int (*)(int*, int);
    using BusIdFn = int (*)(char*, int, int);
    auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
    auto get = reinterpret_cast<GetFn>(::dlsym(lib, "cuDeviceGet"));
    auto bus_id = reinterpret_cast<BusIdFn>(::dlsym(lib, "cuDeviceGetPCIBusId"));
    int n = 0;
    if (init && count && get && bus_id && init(0) == 0 && count(&n) == 0) {
      for (int i = 0; i < n; ++i) {
        int dev = 0;
        char buf[64] = {};
        if (get(&dev, i) == 0 && bus_id(buf, sizeof(buf), dev) == 0) in.gpu_pci_ids.push_back(buf);
      }
    }
    ::dlclose(lib);
  }
  return in;
}

}  // namespace ddp::launcher
