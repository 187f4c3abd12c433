// Several nodes on one machine: network namespaces joined by a bridge
// (support/netns.h), each with its own address, one ddp-launch per node, the
// ranks talking Gloo over the nodes' addresses. Skipped (with the reason)
// where namespaces cannot be made.
#include <catch2/catch.hpp>

#include <memory>
#include <regex>
#include <set>

#include "netns.h"
#include "test_skip.h"
#include "test_support.h"
#include "worker_test_util.h"

using namespace ddp::test;

namespace {

// Starts one ddp-launch per node (node i with env[i]), waits for all, and
// checks that node i ran global ranks 2i and 2i+1 of a world of 4, each of
// which passed the collectives of the helper across nodes.
void run_two_nodes(const NetNodes& nodes, const std::vector<std::vector<std::string>>& launcher_argv,
                   const std::vector<std::map<std::string, std::string>>& env) {
  std::vector<std::unique_ptr<Proc>> procs;
  for (int i = 0; i < 2; ++i) {
    auto argv = launcher_argv[i];
    argv.insert(argv.end(), {helper_path(), "collectives"});
    auto e = env[i];
    // The nodes' interface: Gloo would otherwise pick the address the host
    // name resolves to, which here is loopback (in a real pod it is eth0's).
    e["GLOO_SOCKET_IFNAME"] = "eth0";
    e["DDP_TIMEOUT_S"] = "60";
    e["OMP_NUM_THREADS"] = "1";
    procs.push_back(std::make_unique<Proc>(nodes.exec(i, argv), e));
  }
  std::set<int> all_ranks;
  for (int i = 0; i < 2; ++i) {
    auto code = procs[i]->wait(120);
    const std::string out = procs[i]->output();
    INFO("node " << i << ":\n" << out);
    REQUIRE(code == std::optional<int>(0));
    const std::regex ok("collectives ok on rank (\\d+)");
    std::set<int> here;
    for (std::sregex_iterator it(out.begin(), out.end(), ok), end; it != end; ++it) here.insert(std::stoi((*it)[1]));
    CHECK(here == std::set<int>{2 * i, 2 * i + 1});
    all_ranks.insert(here.begin(), here.end());
  }
  CHECK(all_ranks == std::set<int>{0, 1, 2, 3});
}

}  // namespace

TEST_CASE("multi-node: a static 2-node job across network namespaces gets ranks and world size right on every node") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  std::vector<std::vector<std::string>> argv;
  for (int i = 0; i < 2; ++i)
    argv.push_back({bin_path("ddp-launch"), "--use_env", "--nnodes=2", "--node_rank=" + std::to_string(i),
                    "--nproc_per_node=2", "--master_addr=" + nodes.address(0), "--master_port=29500"});
  run_two_nodes(nodes, argv, {{}, {}});
}

TEST_CASE("multi-node: a Kubernetes PyTorchJob's variables alone start ddp-launch in two pods") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  std::vector<std::map<std::string, std::string>> env(2);
  for (int i = 0; i < 2; ++i) {
    // What the Kubeflow training operator sets in pod i of a 2-replica
    // PyTorchJob with nprocPerNode 2: the PET_ variables for torchrun, and
    // the pod-level RANK/WORLD_SIZE/MASTER_* that the launcher must replace
    // with each worker's own.
    env[i] = {{"PET_NNODES", "2"},
              {"PET_NPROC_PER_NODE", "2"},
              {"PET_NODE_RANK", std::to_string(i)},
              {"PET_MASTER_ADDR", nodes.address(0)},
              {"PET_MASTER_PORT", "23456"},
              {"MASTER_ADDR", nodes.address(0)},
              {"MASTER_PORT", "23456"},
              {"WORLD_SIZE", "2"},
              {"RANK", std::to_string(i)},
              {"PYTHONUNBUFFERED", "1"}};
  }
  // The manifest's command (docs/kubernetes.md): no option but --use_env,
  // which torchrun implies.
  run_two_nodes(nodes, {{bin_path("ddp-launch"), "--use_env"}, {bin_path("ddp-launch"), "--use_env"}}, env);
}
