// Several nodes on one machine: network namespaces joined by a bridge
// (support/netns.h), each with its own address, one ddp-launch per node, the
// ranks talking Gloo over the nodes' addresses. Skipped (with the reason)
// where namespaces cannot be made.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <set>

#include "fashion_fixture.h"
#include "netns.h"
#include "reference_python.h"
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

// c10d rendezvous across the namespaces: one ddp-launch per node, node 0's
// address as --rdzv_endpoint (its launcher hosts the store), node ranks from
// the rendezvous, real training programs.
namespace {


// ddp-launch with c10d for node i of `nodes`, running program args... With
// --nnodes 1:2 a round closes 5 s after its first node joined: time enough
// for the second launcher (LibTorch loads slowly in the sanitizer build) to
// be in round 0 where a test wants both there.
std::vector<std::string> c10d_launch(const NetNodes& nodes, const std::string& nnodes, std::vector<std::string> extra,
                                     const std::vector<std::string>& program, const std::string& join_timeout) {
  std::vector<std::string> argv = {bin_path("ddp-launch"), "--nnodes=" + nnodes, "--nproc_per_node=2",
                                   "--rdzv_backend=c10d", "--rdzv_endpoint=" + nodes.address(0) + ":29400",
                                   "--rdzv_id=netns-job", "--shutdown_timeout=10",
                                   "--rdzv_conf=join_timeout=" + join_timeout + ",last_call_timeout=5,keep_alive_interval=0.5"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::map<std::string, std::string> node_env(std::map<std::string, std::string> extra = {}) {
  extra["GLOO_SOCKET_IFNAME"] = "eth0";
  extra["DDP_TIMEOUT_S"] = "60";
  extra["OMP_NUM_THREADS"] = "1";
  return extra;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Waits for every one of `procs` within one deadline of total_s, below the
// case's CTest timeout (300 s), so that a hang fails the case with every
// node's output instead of CTest killing it before anything is printed.
// Returns each exit code (nullopt: still running at the deadline). On a
// timeout every launcher still running is asked for a live stack dump of
// its ranks (SIGUSR2, in its output), and the process list, taken before
// the Procs are killed, is in `processes`.
std::vector<std::optional<int>> wait_all(std::vector<std::unique_ptr<Proc>>& procs, double total_s,
                                         std::string& processes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(total_s);
  std::vector<std::optional<int>> codes;
  for (auto& p : procs) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    codes.push_back(p->wait(std::max(left, 0.1)));
  }
  if (std::find(codes.begin(), codes.end(), std::nullopt) == codes.end()) return codes;
  // Every process but the kernel's threads (pid 2 and its children).
  processes =
      run({"ps", "--ppid", "2", "-p", "2", "--deselect", "-o", "pid,ppid,pgid,stat,etime,wchan:24,args"}, {}, 10)
          .output;
  for (std::size_t i = 0; i < procs.size(); ++i)
    if (!codes[i]) procs[i]->signal(SIGUSR2);
  for (std::size_t i = 0; i < procs.size(); ++i)
    if (!codes[i]) wait_until([&] { return procs[i]->output().find("ddp-launch: stacks of") != std::string::npos; }, 15);
  return codes;
}

// Starts node 0 (the endpoint's host, so node rank 0 of the first round), then node 1.
std::vector<std::unique_ptr<Proc>> start_two(const NetNodes& nodes, const std::string& nnodes,
                                             const std::vector<std::string>& extra,
                                             const std::vector<std::string>& program,
                                             const std::map<std::string, std::string>& env,
                                             const std::string& join_timeout = "60") {
  std::vector<std::unique_ptr<Proc>> procs;
  procs.push_back(
      std::make_unique<Proc>(nodes.exec(0, c10d_launch(nodes, nnodes, extra, program, join_timeout)), env));
  const bool up = wait_until([&] { return procs[0]->output().find("joining the rendezvous") != std::string::npos; }, 60);
  REQUIRE(up);
  procs.push_back(
      std::make_unique<Proc>(nodes.exec(1, c10d_launch(nodes, nnodes, extra, program, join_timeout)), env));
  return procs;
}

// ddp-train for 3 epochs of `steps` steps, checkpoints in tmp/ck, --max_restarts 1, on both nodes.
// ddp-train-faults when `env` sets DDP_TEST_DIE_AT (ddp-train with the
// tests' fault hook, tests/support/fault_main.cpp), else ddp-train.
// `extra`: more launcher options.
std::vector<std::unique_ptr<Proc>> train_three_epochs(const NetNodes& nodes, const std::string& nnodes, int steps,
                                                      const TempDir& tmp, std::map<std::string, std::string> env,
                                                      std::vector<std::string> extra = {}) {
  const std::string program = env.count("DDP_TEST_DIE_AT") ? "ddp-train-faults" : "ddp-train";
  extra.insert(extra.begin(), "--max_restarts=1");
  return start_two(nodes, nnodes, extra,
                   {bin_path(program), "--epochs=3", "--max_steps=" + std::to_string(steps), "--batch_size=32",
                    "--data_dir=" + small_fashion_dir(), "--checkpoint_dir=" + tmp.file("ck")},
                   node_env(std::move(env)));
}

}  // namespace

TEST_CASE("multi-node c10d: ddp-train, 2 nodes x 2 processes, meets at node 0's endpoint and trains as one world") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  DDP_REQUIRE_FASHION_DATA();
  NetNodes nodes(2);
  TempDir tmp;
  auto procs = start_two(nodes, "2", {},
                         {bin_path("ddp-train"), "--epochs=1", "--max_steps=5", "--batch_size=32",
                          "--data_dir=" + small_fashion_dir(), "--checkpoint_dir=" + tmp.file("ck")},
                         node_env());
  std::string processes;
  const auto codes = wait_all(procs, 220, processes);
  for (int i = 0; i < 2; ++i) {
    INFO("node " << i << ":\n" << procs[i]->output() << (processes.empty() ? "" : "\nprocesses:\n" + processes));
    CHECK(codes[i] == std::optional<int>(0));
  }
  CHECK_THAT(procs[0]->output(), Catch::Contains("round 0: this is node 0 of 2, ranks 0..1 of 4") &&
                                     Catch::Contains("ddp-train: world size 4"));
  CHECK_THAT(procs[1]->output(), Catch::Contains("round 0: this is node 1 of 2, ranks 2..3 of 4"));
  const auto metrics = lines_of(tmp.file("ck/metrics.jsonl"));
  REQUIRE(metrics.size() == 1);
  CHECK_THAT(metrics[0], Catch::Contains("\"world_size\": 4"));
}

TEST_CASE("multi-node c10d: every node names the slow rank of the other node, its windows shared through the store") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  // Rank 3 (node 1, local_rank 1) works twice as long a step as the other three.
  auto procs = start_two(nodes, "2", {"--use_env", "--straggler_window=2"},
                         {helper_path(), "slow-rank", "slow_rank=3", "work_ms=20", "factor=2", "steps=260"},
                         node_env());
  for (auto& p : procs) p->wait(180);
  for (int i = 0; i < 2; ++i) {
    INFO("node 0:\n" << procs[0]->output() << "\nnode 1:\n" << procs[1]->output());
    REQUIRE(procs[i]->wait(1) == std::optional<int>(0));
    std::smatch m;
    const std::string out = procs[i]->output();
    REQUIRE(std::regex_search(out, m,
                              std::regex("ddp-launch: rank 3 \\(host [^,]+, local_rank 1\\) is a straggler: .* on the "
                                         "fastest of 4 ranks \\(score ([0-9.]+)\\)")));
    CHECK(std::stod(m[1]) == Approx(0.5).margin(0.1));
  }
}

TEST_CASE("multi-node c10d: the seeds-style Python DDP script runs unchanged, 2 nodes x 2 processes") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  DDP_REQUIRE_FASHION_DATA();
  DDP_REFERENCE_PYTHON_OR_SKIP(python);
  NetNodes nodes(2);
  TempDir tmp;
  // torch.distributed.launch style: --local_rank=N in argv, env:// init.
  auto procs = start_two(nodes, "2", {},
                         {source_path("bench/train/python_ddp.py"), "--epochs=1", "--max_steps=5",
                          "--batch_size=32", "--data_dir=" + small_fashion_dir(), "--checkpoint_dir=" + tmp.file("ck")},
                         node_env({{"PYTHON_EXEC", python}}));
  std::string processes;
  const auto codes = wait_all(procs, 220, processes);
  for (int i = 0; i < 2; ++i) {
    INFO("node " << i << ":\n" << procs[i]->output() << (processes.empty() ? "" : "\nprocesses:\n" + processes));
    CHECK(codes[i] == std::optional<int>(0));
  }
  const auto metrics = lines_of(tmp.file("ck/metrics.jsonl"));
  REQUIRE(metrics.size() == 1);
  CHECK_THAT(metrics[0], Catch::Contains("\"world_size\": 4"));
}

TEST_CASE("multi-node c10d --nnodes 1:2 --max_restarts 1: a node's launcher SIGKILLed mid-training, the other "
          "re-rendezvouses and finishes alone from the last checkpoint") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  DDP_REQUIRE_FASHION_DATA();
  NetNodes nodes(2);
  TempDir tmp;
  auto procs = train_three_epochs(nodes, "1:2", 10, tmp, {});
  // Mid-training: once epoch 1's checkpoint is written.
  REQUIRE(wait_until([&] { return std::filesystem::exists(tmp.file("ck/epoch_1.pt")); }, 180));
  procs[1]->signal(SIGKILL);
  const auto code = procs[0]->wait(240);
  const std::string out = procs[0]->output();
  INFO(out);
  CHECK(code == std::optional<int>(0));
  // Its workers saw the peer vanish (or its heartbeat stop): a counted restart, then a round alone.
  CHECK_THAT(out, Catch::Contains("restart 1 of 1") && Catch::Contains("round 1: this is node 0 of 1, ranks 0..1 of 2") &&
                      Catch::Contains("resumed from " + tmp.file("ck/epoch_")));
  const auto metrics = lines_of(tmp.file("ck/metrics.jsonl"));
  REQUIRE(metrics.size() == 3);
  CHECK_THAT(metrics[2], Catch::Contains("\"epoch\": 3") && Catch::Contains("\"world_size\": 2"));
}

TEST_CASE("multi-node c10d: a worker failure on one node restarts the workers on both nodes, which resume together") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  DDP_REQUIRE_FASHION_DATA();
  NetNodes nodes(2);
  TempDir tmp;
  // Rank 3 (node 1) SIGKILLs itself before global step 14 on the first
  // attempt. --recovery restart: else only rank 3 would come back, in place
  // (tests/train/test_in_place_recovery_nodes.cpp).
  auto procs = train_three_epochs(nodes, "2", 6, tmp, {{"DDP_TEST_DIE_AT", "3:14"}}, {"--recovery=restart"});
  std::string processes;
  const auto codes = wait_all(procs, 220, processes);
  for (int i = 0; i < 2; ++i) {
    INFO("node " << i << ":\n" << procs[i]->output() << (processes.empty() ? "" : "\nprocesses:\n" + processes));
    CHECK(codes[i] == std::optional<int>(0));
    // Node ranks are kept across rounds: rank 0 stays with its checkpoints.
    CHECK_THAT(procs[i]->output(), Catch::Contains("round 1: this is node " + std::to_string(i) + " of 2") &&
                                       Catch::Contains("restart count 1"));
  }
  // Node 0 learns that rank 3 on node 1 ended the round: its workers are
  // stopped by the rendezvous ("stopping this node's workers: rank 3 ..."),
  // or they fail on their own first when Gloo sees rank 3's connection close
  // (a race of milliseconds); the round's one reason names rank 3 either way.
  CHECK_THAT(procs[0]->output(), Catch::Contains("round 0 ended: rank 3 (local_rank 1") &&
                                     Catch::Contains("resumed from " + tmp.file("ck/epoch_2.pt")));
  CHECK(lines_of(tmp.file("ck/metrics.jsonl")).size() == 3);
}

TEST_CASE("multi-node c10d --nnodes 2: a lost node fails the job within the timeouts, and the survivor names it") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  for (int lost : {1, 0}) {
    INFO("lost node " << lost);
    auto procs = start_two(nodes, "2", {"--max_restarts=1", "--use_env"}, {"/bin/sleep", "600"}, node_env(), "5");
    REQUIRE(wait_until([&] { return procs[1]->output().find("round 0:") != std::string::npos; }, 60));
    procs[lost]->signal(SIGKILL);
    const int other = 1 - lost;
    const auto code = procs[other]->wait(120);
    const std::string out = procs[other]->output();
    INFO(out);
    CHECK(code == std::optional<int>(1));
    if (lost == 1) {
      CHECK_THAT(out, Catch::Contains("node n1 (pid") && Catch::Contains("left during round 0") &&
                          Catch::Contains("1/2 nodes joined after 5 s") && Catch::Contains("did not come back"));
    } else {
      CHECK_THAT(out, Catch::Contains("the rendezvous store at " + nodes.address(0) + ":29400 stopped answering"));
    }
  }
}

TEST_CASE("multi-node c10d --nnodes 1:2: a node that arrives late joins at the next round and the ranks then talk "
          "across both nodes") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  // Alone (world 2), the workers wait to be stopped; in a world of 4 they run the collectives.
  const std::vector<std::string> program = {
      "/bin/sh", "-c", "if [ \"$WORLD_SIZE\" = 4 ]; then exec \"$0\" collectives; fi; exec sleep 600", helper_path()};
  std::vector<std::unique_ptr<Proc>> procs;
  procs.push_back(std::make_unique<Proc>(nodes.exec(0, c10d_launch(nodes, "1:2", {"--use_env"}, program, "60")),
                                         node_env()));
  REQUIRE(wait_until([&] { return procs[0]->output().find("round 0: this is node 0 of 1") != std::string::npos; },
                     60));
  procs.push_back(std::make_unique<Proc>(nodes.exec(1, c10d_launch(nodes, "1:2", {"--use_env"}, program, "60")),
                                         node_env()));
  std::set<int> ranks;
  for (int i = 0; i < 2; ++i) {
    const auto code = procs[i]->wait(120);
    const std::string out = procs[i]->output();
    INFO("node " << i << ":\n" << out);
    CHECK(code == std::optional<int>(0));
    CHECK_THAT(out, Catch::Contains("round 1: this is node " + std::to_string(i) + " of 2"));
    const std::regex ok("collectives ok on rank (\\d+)");
    for (std::sregex_iterator it(out.begin(), out.end(), ok), end; it != end; ++it) ranks.insert(std::stoi((*it)[1]));
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3});
  CHECK_THAT(procs[0]->output(), Catch::Contains("is waiting to join") && Catch::Contains("not counted as a restart"));
}

TEST_CASE("multi-node c10d: a node that never arrives ends the rendezvous with a clear error after join_timeout") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  Proc p(nodes.exec(0, c10d_launch(nodes, "2", {"--use_env"}, {"/bin/true"}, "3")), node_env());
  const auto code = p.wait(60);
  INFO(p.output());
  CHECK(code == std::optional<int>(1));
  CHECK_THAT(p.output(), Catch::Contains("ddp-launch: error: rendezvous at " + nodes.address(0) +
                                         ":29400 (rdzv_id netns-job): 1/2 nodes joined after 3 s"));
}
