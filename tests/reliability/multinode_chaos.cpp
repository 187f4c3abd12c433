// Multi-node chaos across network namespaces (support/netns.h): 2 nodes x 2
// workers, c10d rendezvous at node 0's address, --nnodes 1:2 --max_restarts 1.
// In a world of 4 the workers run the test helper's train-forever (a DDP
// step, an all-reduce across the nodes, forever); alone (world 2) they run
// the collectives and exit 0. Node 1 then meets one fault mid-allreduce:
//   its link cut (`ip link set eth0 down` in its namespace),
//   its launcher paused (SIGSTOP of the launcher alone),
//   the whole node paused (SIGSTOP of every process of the node).
// Node 0 must see it within the configured timeouts (the rendezvous
// heartbeat, keep_alive_interval x keep_alive_max_attempt, well inside
// DDP_TIMEOUT_S), name node n1, restart and finish alone; node 1, once its
// link is back or it is resumed, must end with a failure, bounded; neither
// node leaves a process, a file in its TMPDIR or a segment behind. (A node's
// launcher SIGKILLed is covered in tests/worker/test_multinode.cpp.)
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <memory>

#include "chaos_common.h"
#include "netns.h"
#include "sandbox.h"
#include "test_skip.h"
#include "test_support.h"

using namespace ddp::test;

namespace {

constexpr double kDdpTimeout = 30;     // DDP_TIMEOUT_S of the workers
constexpr double kHeartbeat = 1 * 4;   // keep_alive_interval x keep_alive_max_attempt

std::vector<std::string> node_launcher(const NetNodes& nodes) {
  const std::string helper = bin_path("ddp-worker-test-helper");
  return {bin_path("ddp-launch"), "--nnodes=1:2", "--nproc_per_node=2", "--rdzv_backend=c10d",
          "--rdzv_endpoint=" + nodes.address(0) + ":29400", "--rdzv_id=chaos", "--max_restarts=1",
          "--shutdown_timeout=5", "--use_env",
          "--rdzv_conf=join_timeout=60,last_call_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=4",
          // Steps go to a file (test_support's Proc output is read whole at every poll).
          "/bin/sh", "-c",
          "if [ \"$WORLD_SIZE\" = 4 ]; then exec \"$0\" train-forever > \"$CHAOS_STEPS.$RANK\"; fi; exec \"$0\" collectives",
          helper};
}

std::map<std::string, std::string> node_env(const Sandbox& sb) {
  return sb.env({{"GLOO_SOCKET_IFNAME", "eth0"},
                 {"CHAOS_STEPS", sb.work("steps")},
                 {"DDP_TIMEOUT_S", std::to_string(static_cast<int>(kDdpTimeout))},
                 {"OMP_NUM_THREADS", "1"}});
}

struct TwoNodes {
  NetNodes nodes{2};
  Sandbox sb0{"node0"}, sb1{"node1"};
  std::unique_ptr<Proc> n0, n1;

  // Both nodes up, in one world of 4, every rank past some steps.
  void start() {
    // Together: node 1 retries until node 0's store is up, well inside
    // last_call_timeout, so round 0 closes with both.
    n0 = std::make_unique<Proc>(nodes.exec(0, sb0.wrap(node_launcher(nodes))), node_env(sb0));
    n1 = std::make_unique<Proc>(nodes.exec(1, sb1.wrap(node_launcher(nodes))), node_env(sb1));
    INFO(n0->output());
    // Rank 0 past 20 steps ("step N\n" each): all-reduces across the nodes go on.
    REQUIRE(wait_until([&] {
      std::error_code ec;
      const auto size = std::filesystem::file_size(sb0.work("steps.0"), ec);
      return (!ec && size > 160) || !n0->running();
    }, 120));
    REQUIRE(n0->running());
    REQUIRE(n1->running());
  }

  // Node 0 named node n1 as gone, restarted and finished alone.
  void check_survivor(const Stopwatch& since_fault, double* detected_after) {
    const bool seen = wait_until([&] {
      const std::string out = n0->output();
      return out.find("node n1") != std::string::npos && out.find("left during round 0") != std::string::npos;
    }, kDdpTimeout + 30);
    *detected_after = since_fault.seconds();
    const auto code = n0->wait(seen ? 120 : 1);
    const std::string out = n0->output();
    INFO("node 0:\n" << out);
    CHECK(seen);
    CHECK(*detected_after <= kDdpTimeout);
    REQUIRE(code);
    CHECK(*code == 0);
    CHECK_THAT(out, Catch::Contains("round 1: this is node 0 of 1, ranks 0..1 of 2") &&
                        Catch::Contains("collectives ok on rank 1"));
  }

  // Node 1 ends with a failure, bounded, and neither node leaves anything.
  void check_loser_and_leftovers() {
    const auto code = n1->wait(90);
    INFO("node 1:\n" << n1->output());
    REQUIRE(code);  // no hang
    CHECK(*code != 0);
    for (auto [sb, p] : {std::pair{&sb0, n0.get()}, std::pair{&sb1, n1.get()}}) {
      const Leftovers l = sb->leftovers(false, 0, p->output());
      INFO("left behind by " << sb->marker() << ":\n" << l.describe());
      CHECK(l.empty());
    }
  }

  void signal_node1(int sig) {
    for (pid_t pid : sb1.find({})) ::kill(pid, sig);
  }
};

}  // namespace

TEST_CASE("multi-node chaos --nnodes 1:2: node 1's link cut mid-allreduce is detected within the timeouts, node 0 "
          "names it and finishes alone",
          "[reliability][multinode]") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  TwoNodes t;
  t.start();
  Stopwatch since;
  REQUIRE(run({"ip", "-n", t.nodes.name(1), "link", "set", "eth0", "down"}, {}, 30).exit_code == 0);
  double detected = 0;
  t.check_survivor(since, &detected);
  // The partition heals after node 0 is gone: node 1 finds no job.
  REQUIRE(run({"ip", "-n", t.nodes.name(1), "link", "set", "eth0", "up"}, {}, 30).exit_code == 0);
  t.check_loser_and_leftovers();
  print_result("multi-node: link of node 1 cut", "detected after " + std::to_string(static_cast<int>(detected)) + " s",
               since.seconds());
}

TEST_CASE("multi-node chaos --nnodes 1:2: node 1's launcher paused (SIGSTOP) is detected within the timeouts, node "
          "0 names it and finishes alone",
          "[reliability][multinode]") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  TwoNodes t;
  t.start();
  Stopwatch since;
  t.n1->signal(SIGSTOP);  // the launcher alone; its workers and helper go on
  double detected = 0;
  t.check_survivor(since, &detected);
  t.n1->signal(SIGCONT);
  t.check_loser_and_leftovers();
  print_result("multi-node: launcher of node 1 paused",
               "detected after " + std::to_string(static_cast<int>(detected)) + " s", since.seconds());
}

TEST_CASE("multi-node chaos --nnodes 1:2: node 1 paused whole (every process SIGSTOPped) is detected within the "
          "timeouts, node 0 names it and finishes alone",
          "[reliability][multinode]") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  TwoNodes t;
  t.start();
  Stopwatch since;
  t.signal_node1(SIGSTOP);
  double detected = 0;
  t.check_survivor(since, &detected);
  t.signal_node1(SIGCONT);
  t.check_loser_and_leftovers();
  print_result("multi-node: node 1 paused whole", "detected after " + std::to_string(static_cast<int>(detected)) + " s",
               since.seconds());
}
