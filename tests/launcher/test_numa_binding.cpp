// --numa_binding against a fake sysfs tree: torch/numa/binding.py's four
// modes, CPU lists, and the errors.
#include "ddp/launcher/config/numa_binding.h"
#include "ddp/launcher/config/options.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace ddp::launcher;
namespace fs = std::filesystem;

namespace {

// 16 CPUs, two threads per core (cpu c and c+8). NUMA node 0: cores 0-3 on
// socket 0, two L3 caches (cores 0-1, cores 2-3); node 1: cores 4-5 on
// socket 0; node 2: cores 6-7 on socket 1; node 3: memory only. GPUs 0, 1
// and 4 on node 0 (GPU 4's numa_node says -1), GPU 2 on node 1, GPU 3 on node 2.
struct FakeSysfs {
  fs::path root;
  FakeSysfs() {
    char t[] = "/tmp/ddp-sysfs-XXXXXX";
    root = ::mkdtemp(t);
    put("devices/system/node/possible", "0-3\n");
    put("devices/system/node/node0/cpulist", "0-3,8-11\n");
    put("devices/system/node/node1/cpulist", "4-5,12-13\n");
    put("devices/system/node/node2/cpulist", "6-7,14-15\n");
    put("devices/system/node/node3/cpulist", "\n");
    for (int c = 0; c < 16; ++c) {
      const int core = c % 8;
      const std::string cpu = "devices/system/cpu/cpu" + std::to_string(c);
      put(cpu + "/topology/thread_siblings_list", std::to_string(core) + "," + std::to_string(core + 8) + "\n");
      put(cpu + "/topology/physical_package_id", core < 6 ? "0\n" : "1\n");
      cache(cpu, 0, "Data", 1, std::to_string(core) + "," + std::to_string(core + 8));
      cache(cpu, 1, "Instruction", 4, "0-15");  // not a data cache: never the last level
      cache(cpu, 2, "Unified", 2, std::to_string(core) + "," + std::to_string(core + 8));
      const std::string l3 = core < 2 ? "0-1,8-9" : core < 4 ? "2-3,10-11" : core < 6 ? "4-5,12-13" : "6-7,14-15";
      cache(cpu, 3, "Unified", 3, l3);
    }
    gpu("0000:1a:00.0", "0");
    gpu("0000:1b:00.0", "0");
    gpu("0000:3c:00.0", "1");
    gpu("0000:ab:00.0", "2");
    gpu("0001:02:00.0", "-1");
  }
  ~FakeSysfs() { fs::remove_all(root); }
  void put(const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  }
  void cache(const std::string& cpu, int index, const std::string& type, int level, const std::string& shared) {
    const std::string dir = cpu + "/cache/index" + std::to_string(index);
    put(dir + "/type", type + "\n");
    put(dir + "/level", std::to_string(level) + "\n");
    put(dir + "/shared_cpu_list", shared + "\n");
  }
  void gpu(const std::string& address, const std::string& node) { put("bus/pci/devices/" + address + "/numa_node", node + "\n"); }

  NumaInputs inputs() const {
    NumaInputs in;
    in.sysfs_root = root;
    // As cuDeviceGetPCIBusId writes them: upper case, the domain 4 or 8 digits.
    in.gpu_pci_ids = {"00000000:1A:00.0", "0000:1B:00.0", "0000:3C:00.0", "0000:AB:00.0", "0001:02:00.0"};
    for (int c = 0; c < 16; ++c) in.allowed_cpus.insert(c);
    return in;
  }
};

std::vector<std::string> bind(const std::string& mode, std::vector<int> ranks, const NumaInputs& in) {
  std::vector<std::string> out;
  for (const auto& cpus : numa_cpu_bindings(mode, "--numa-binding " + mode, ranks, in)) out.push_back(format_cpu_list(cpus));
  return out;
}

std::string error_of(const std::string& mode, std::vector<int> ranks, const NumaInputs& in) {
  try {
    numa_cpu_bindings(mode, "--numa-binding " + mode, ranks, in);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("numa binding: CPU lists as sysfs writes them") {
  CHECK(parse_cpu_list("0-3,8,10-11\n", "f") == std::set<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("\n", "f").empty());
  CHECK(format_cpu_list({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(format_cpu_list({}) == "");
  CHECK_THROWS_WITH(parse_cpu_list("0-x", "/sys/x"), Catch::StartsWith("/sys/x: '0-x' is not a CPU list like 0-3,8"));
  CHECK_THROWS_WITH(parse_cpu_list("5-3", "/sys/x"), Catch::StartsWith("/sys/x: '5-3' is not a CPU list"));
}

TEST_CASE("numa binding node: every CPU of the GPU's NUMA node (-1 is node 0)") {
  FakeSysfs sys;
  CHECK(bind("node", {0, 1, 2, 3, 4}, sys.inputs()) ==
        std::vector<std::string>{"0-3,8-11", "0-3,8-11", "4-5,12-13", "6-7,14-15", "0-3,8-11"});
  NumaInputs in = sys.inputs();
  for (int c = 8; c < 12; ++c) in.allowed_cpus.erase(c);  // the launcher's own mask bounds it
  CHECK(bind("node", {0}, in) == std::vector<std::string>{"0-3"});
}

TEST_CASE("numa binding socket: every node of the GPU's socket") {
  FakeSysfs sys;
  CHECK(bind("socket", {0, 2, 3}, sys.inputs()) == std::vector<std::string>{"0-5,8-13", "0-5,8-13", "6-7,14-15"});
}

TEST_CASE("numa binding exclusive: the node's physical cores shared out, the lowest GPUs one extra") {
  FakeSysfs sys;
  // Node 0: 4 cores for GPUs 0, 1, 4: 2, 1 and 1 cores, both threads of each.
  CHECK(bind("exclusive", {0, 1, 4, 2}, sys.inputs()) ==
        std::vector<std::string>{"0-1,8-9", "2,10", "3,11", "4-5,12-13"});
  NumaInputs in = sys.inputs();
  for (int c : {2, 3, 10, 11}) in.allowed_cpus.erase(c);
  CHECK_THAT(error_of("exclusive", {0}, in),
             Catch::StartsWith("--numa-binding exclusive: NUMA node 0 has 2 physical cores for 3 GPUs; use node or socket"));
}

TEST_CASE("numa binding core-complex: one last-level cache per GPU, round robin") {
  FakeSysfs sys;
  CHECK(bind("core-complex", {0, 1, 4, 3}, sys.inputs()) ==
        std::vector<std::string>{"0-1,8-9", "2-3,10-11", "0-1,8-9", "6-7,14-15"});
  // The cache with more usable CPUs goes first.
  NumaInputs in = sys.inputs();
  in.allowed_cpus.erase(0);
  CHECK(bind("core-complex", {0, 1}, in) == std::vector<std::string>{"2-3,10-11", "1,8-9"});
}

TEST_CASE("numa binding: no GPU, a local rank without a GPU, a missing file are one line each") {
  FakeSysfs sys;
  NumaInputs none = sys.inputs();
  none.gpu_pci_ids.clear();
  CHECK_THAT(error_of("node", {0}, none),
             Catch::StartsWith("--numa-binding node: no NVIDIA GPU is visible (no CUDA driver, or CUDA_VISIBLE_DEVICES "
                               "hides them)"));
  CHECK_THAT(error_of("node", {0, 5}, sys.inputs()),
             Catch::StartsWith("--numa-binding node: local rank 5 has no GPU (5 visible)"));
  fs::remove(sys.root / "bus/pci/devices/0000:3c:00.0/numa_node");
  CHECK_THAT(error_of("node", {2}, sys.inputs()),
             Catch::StartsWith("--numa-binding node: cannot read " + (sys.root / "bus/pci/devices/0000:3c:00.0/numa_node").string()));
  NumaInputs bad = sys.inputs();
  bad.gpu_pci_ids[0] = "gpu0";
  CHECK_THAT(error_of("node", {0}, bad), Catch::StartsWith("--numa-binding node: GPU 0 has the PCI bus id 'gpu0'"));
  NumaInputs outside = sys.inputs();
  outside.allowed_cpus = {4, 5};
  CHECK_THAT(error_of("node", {0}, outside),
             Catch::StartsWith("--numa-binding node: no CPU of NUMA node 0 (GPU 0's) is in the launcher's affinity mask"));
}
