// Black-box scenarios: what the real ddp-launch does with its command line
// and surroundings before any worker runs (bad input, a port in use, a CRLF
// script, --standalone, port 0, --numa-binding).
#include <catch2/catch.hpp>

#include "ddp/common/free_port.h"
#include "scenario_util.h"
#include "test_support.h"
#include "test_skip.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sched.h>
#include <set>
#include <sstream>
#include <vector>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

const std::string& kWorker = scenario_worker();

// "0-3,8" -> {0, 1, 2, 3, 8}, as sysfs and /proc write CPU lists.
std::set<int> cpu_list(const std::string& text) {
  std::set<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.find_first_of("0123456789") == std::string::npos) continue;
    const auto dash = item.find('-');
    const int lo = std::stoi(item), hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) out.insert(c);
  }
  return out;
}

}  // namespace

TEST_CASE("bad input: one line naming the value, exit 2, no worker started") {
  TempDir out;
  write_file(out.file("not-exec"), "#!/bin/sh\n", false);
  write_file(out.file("script.py"), "print(1)\n", false);
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--bogus", kWorker}, "'--bogus'"},
      {{"--nproc_per_node=0", kWorker}, "'0'"},
      {{"--nproc_per_node=-3", kWorker}, "'-3'"},
      {{"--nproc_per_node=lots", kWorker}, "'lots'"},
      {{"--nnodes=2", "--node_rank=2", kWorker}, "--node_rank 2"},
      {{"--master_port=0", "--nnodes=2", kWorker}, "--master_port 0: port 0 (a free port) works for a one-node job only"},
      {{"--master_port=70000", kWorker}, "70000"},
      {{"--nproc_per_node=2"}, "missing program"},
      {{out.file("not-exec")}, "is not executable"},
      {{"--no_python", out.file("script.py")}, "--no_python"},
      {{out.file("missing-program")}, "not found"},
      {{"--max_restarts=x", kWorker}, "'x'"},
      {{"--nproc_per_node=gpu", kWorker}, "no NVIDIA GPU is visible"},
      {{"--tee", "3:", kWorker}, "--tee: '3:'"},
      {{"--rdzv-backend=c10d", kWorker}, "--rdzv_backend c10d needs --rdzv_endpoint HOST[:PORT]"},
      {{out.path()}, "is a directory"},
      // Checked at start, not after the run (issue 15).
      {{"--summary_json", out.path(), kWorker}, "--summary_json " + out.path() + ": '" + out.path() + "' is a directory"},
      {{"--log_dir", out.file("script.py"), kWorker}, "is not a directory"},
      {{"--master_addr=no-such-host.invalid", "--master_port=" + std::to_string(free_port()), kWorker},
       "--master_addr no-such-host.invalid: the host does not resolve (Name or service not known)"},
      {{"--nnodes=2", "--node_rank=1", "--rdzv_endpoint=no-such-host.invalid:29400", kWorker},
       "--rdzv_endpoint no-such-host.invalid:29400: the host does not resolve"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{launcher()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    INFO("args: " << Catch::Detail::stringify(c.args));
    auto r = run(argv, scenario_env(out, "sleep", {{"CUDA_VISIBLE_DEVICES", ""}}), 30);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::StartsWith("ddp-launch: error: ") && Catch::Contains(c.expect) &&
                             Catch::Contains("ddp-launch --help"));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  auto pet = run({launcher(), kWorker},
                 scenario_env(out, "sleep",
                              {{"PET_RDZV_BACKEND", "c10d"},
                               {"PET_RDZV_ENDPOINT", "node0:29400"},
                               {"PET_RDZV_CONF", "join_timeout=soon"}}),
                 30);
  CHECK(pet.exit_code == 2);
  CHECK_THAT(pet.output, Catch::StartsWith("ddp-launch: error: PET_RDZV_CONF join_timeout: 'soon'"));
  CHECK_FALSE(fs::exists(out.file("pid.0")));  // no worker ever started
}

TEST_CASE("a master port already in use is refused before any worker starts") {
  TempDir out;
  int port = free_port();
  // Hold the port with a listener for the duration of the check.
  Proc holder({"python3", "-c",
               "import socket,sys,time\ns=socket.socket(); s.bind(('0.0.0.0'," + std::to_string(port) +
                   ")); s.listen(); open(sys.argv[1],'w').close(); time.sleep(60)",
               out.file("listening")});
  REQUIRE(wait_until([&] { return fs::exists(out.file("listening")); }, 30));
  auto r = run({launcher(), "--nproc_per_node=1", "--master_port=" + std::to_string(port), kWorker},
               scenario_env(out, "sleep"), 30);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--master_port " + std::to_string(port) + " is already in use"));
  CHECK_FALSE(fs::exists(out.file("pid.0")));
}

TEST_CASE("a script with a CRLF #! line fails with 127, naming the interpreter and the line endings") {
  TempDir out;
  write_file(out.file("crlf.sh"), "#!/bin/sh\r\necho hi\r\n", true);
  write_file(out.file("noshebang"), "echo hi\n", true);
  auto r = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), out.file("crlf.sh")},
               scenario_env(out, "sleep"), 60);
  INFO(r.output);
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.output, Catch::Contains("cannot execute " + out.file("crlf.sh")) &&
                           Catch::Contains("the interpreter '/bin/sh\\r' does not exist; the script has Windows "
                                           "line endings"));
  auto n = run({launcher(), "--standalone", out.file("noshebang")}, scenario_env(out, "sleep"), 60);
  INFO(n.output);
  CHECK(n.exit_code == 126);
  CHECK_THAT(n.output, Catch::Contains("not a program this machine can run"));
}

TEST_CASE("standalone says which rendezvous options it ignores, in one line, and runs the job") {
  TempDir out;
  auto r = run({launcher(), "--standalone", "--master_addr=no-such-host.invalid", "--master_port=1",
                "--rdzv_endpoint=elsewhere:2", kWorker},
               scenario_env(out, "env"), 60);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: --standalone picks its own rendezvous on this machine; ignoring "
                                       "--master_addr, --master_port, --rdzv_endpoint\n"));
  CHECK(parse_env_dump(read_file(out.file("env.0")))["MASTER_ADDR"] == "127.0.0.1");
}

TEST_CASE("standalone runs on a free port, --help and --version exit 0") {
  TempDir out;
  auto r = run({launcher(), "--standalone", "--nproc_per_node=2", kWorker}, scenario_env(out, "env"), 60);
  REQUIRE(r.exit_code == 0);
  auto env = parse_env_dump(read_file(out.file("env.0")));
  CHECK(env["MASTER_PORT"] != "29500");
  CHECK(env["MASTER_PORT"] == parse_env_dump(read_file(out.file("env.1")))["MASTER_PORT"]);
  // Outside the kernel's ephemeral range: no other program's outgoing connection can take it
  // before rank 0's store binds it (ddp/common/free_port.h).
  CHECK_FALSE(ddp::ephemeral_port_range().contains(std::atoi(env["MASTER_PORT"].c_str())));
  CHECK(std::atoi(env["MASTER_PORT"].c_str()) >= 30000);
  CHECK(run({launcher(), "--help"}).exit_code == 0);
  CHECK_THAT(run({launcher(), "--version"}).output, Catch::StartsWith("ddp-launch "));
}

TEST_CASE("rdzv-endpoint localhost:0 runs a one-node job on a free port that every worker gets as MASTER_PORT") {
  // torchrun's recipe for several one-node jobs on one host; torchrun 2.11 itself hands its static
  // workers MASTER_PORT=0 there (their init_process_group then times out connecting to port 0).
  for (const std::string spelling : {"--rdzv-endpoint=localhost:0", "--rdzv_endpoint=localhost:0", "--master_port=0"}) {
    INFO(spelling);
    TempDir out;
    auto r = run({launcher(), spelling, "--nproc_per_node=2", kWorker}, scenario_env(out, "env"), 60);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto env0 = parse_env_dump(read_file(out.file("env.0")));
    const int port = std::atoi(env0["MASTER_PORT"].c_str());
    CHECK(port > 0);
    CHECK(port <= 65535);
    CHECK_FALSE(ddp::ephemeral_port_range().contains(port));
    CHECK(env0["MASTER_PORT"] == parse_env_dump(read_file(out.file("env.1")))["MASTER_PORT"]);
    if (spelling != "--master_port=0") CHECK(env0["MASTER_ADDR"] == "localhost");
  }
  TempDir out;
  auto pet = run({launcher(), "--nproc_per_node=1", kWorker}, scenario_env(out, "env", {{"PET_RDZV_ENDPOINT", "127.0.0.1:0"}}), 60);
  INFO(pet.output);
  REQUIRE(pet.exit_code == 0);
  CHECK(std::atoi(parse_env_dump(read_file(out.file("env.0")))["MASTER_PORT"].c_str()) > 0);
  // Two nodes could not share a port only one of them knows: refused before any worker starts.
  TempDir none;
  auto two = run({launcher(), "--rdzv-endpoint=localhost:0", "--nnodes=2", kWorker}, scenario_env(none, "env"), 60);
  CHECK(two.exit_code == 2);
  CHECK_THAT(two.output, Catch::Contains("ddp-launch: error: --rdzv-endpoint localhost:0: port 0 (a free port) works "
                                         "for a one-node job only, and this job has 2 nodes"));
  CHECK_FALSE(fs::exists(none.file("env.0")));
}

TEST_CASE("numa_binding without a visible GPU: one line naming the option, exit 2, no worker started") {
  TempDir out;
  auto r = run({launcher(), "--numa-binding", "node", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "affinity", {{"CUDA_VISIBLE_DEVICES", ""}}), 60);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: error: --numa-binding node: no NVIDIA GPU is visible"));
  CHECK_FALSE(fs::exists(out.file("pid.0")));
}

TEST_CASE("numa_binding node on a GPU machine: each worker runs on its GPU's NUMA node's CPUs") {
  // GPUs in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID below), as the driver lists them.
  std::vector<std::string> gpus;
  if (fs::exists("/proc/driver/nvidia/gpus"))
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus")) gpus.push_back(e.path().filename());
  if (gpus.empty()) DDP_SKIP("no NVIDIA GPU here (/proc/driver/nvidia/gpus)");
  std::sort(gpus.begin(), gpus.end());
  const int n = static_cast<int>(std::min<size_t>(gpus.size(), 2));
  TempDir out;
  auto r = run({launcher(), "--numa-binding=node", "--nproc_per_node=" + std::to_string(n),
                "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "affinity", {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}, {"CUDA_VISIBLE_DEVICES", "\x01unset"}}),
               120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  sched_getaffinity(0, sizeof(mine), &mine);
  for (int lr = 0; lr < n; ++lr) {
    std::string id = gpus[static_cast<size_t>(lr)];
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
    const int node = std::max(0, std::stoi(read_file("/sys/bus/pci/devices/" + id + "/numa_node")));
    std::set<int> expect;
    for (int c : cpu_list(read_file("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist")))
      if (CPU_ISSET(c, &mine)) expect.insert(c);
    INFO("local rank " << lr << ", GPU " << id << ", NUMA node " << node);
    CHECK(cpu_list(read_file(out.file("cpus." + std::to_string(lr)))) == expect);
  }
}
