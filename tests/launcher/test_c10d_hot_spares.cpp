// Hot spare nodes (--hot_spares) with real launchers: ddp-launch nodes in
// network namespaces (netns.h) meet at a rendezvous store in a namespace of
// its own (a bare ddp-rdzv), so any launcher may be lost with the store
// kept. Which launcher is active and which stands by follows join order,
// and "joining the rendezvous" is logged before the join: the test reads
// each node's role from its log, never from its start order.
//  - 2+1: two active nodes, one spare; an active node's launcher SIGKILLed;
//    the spare takes its node rank within the keep-alive timeout plus one
//    round, the world size stays 2, and both end 0. About 4 s.
//  - NVRx #348: four agents for --nnodes 2 --hot_spares 1: the job goes on
//    and ends 0; the spare ends 0 unneeded; the fourth is told at once that
//    it is not needed. About 4 s.
// Skipped (77) without root.
#include "netns.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <memory>
#include <vector>

using namespace ddp::test;

namespace {

// The store's namespace is the last one; its helper never joins (the sleep
// holds its stdin open).
std::unique_ptr<Proc> store_node(const NetNodes& nodes, const std::string& id) {
  const int s = nodes.size() - 1;
  return std::make_unique<Proc>(nodes.exec(
      s, {"sh", "-c", "sleep 300 | exec " + bin_path("ddp-rdzv") + " --host=" + nodes.address(s) +
                          " --port=29400 --id=" + id + " --min=2 --max=2 --nproc=1 --is_host=1"}));
}

// Node i: --nnodes 2 --hot_spares 1, one /bin/sh worker running `script`.
std::unique_ptr<Proc> launcher(const NetNodes& nodes, int i, const std::string& id, const std::string& script) {
  return std::make_unique<Proc>(
      nodes.exec(i, {bin_path("ddp-launch"), "--nnodes=2", "--hot_spares=1", "--use_env", "--no_python",
                     "--max_restarts=1", "--rdzv_backend=c10d",
                     "--rdzv_endpoint=" + nodes.address(nodes.size() - 1) + ":29400", "--rdzv_id=" + id,
                     "--shutdown_timeout=2",
                     "--rdzv_conf=join_timeout=30,keep_alive_interval=0.5,keep_alive_max_attempt=2", "/bin/sh", "-c",
                     script}),
      std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}});
}

bool active(const Proc& p) { return p.output().find("this is node") != std::string::npos; }

}  // namespace

TEST_CASE("hot spares: 2+1 nodes, an active node's launcher SIGKILLed: the spare takes its node rank within the "
          "keep-alive timeout plus one round, the world stays 2, the job ends 0") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(4);
  auto store = store_node(nodes, "spare-2-1");
  // Round 0 holds (it ends by the kill); round 1 says where it runs and ends.
  const std::string script =
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then echo \"rank $RANK up\"; exec sleep 60; fi; "
      "echo \"round-1 rank $RANK of $WORLD_SIZE node $GROUP_RANK\"";
  std::vector<std::unique_ptr<Proc>> p;
  for (int i = 0; i < 3; ++i) {
    p.push_back(launcher(nodes, i, "spare-2-1", script));
    REQUIRE(wait_until([&] { return p.back()->output().find("joining the rendezvous") != std::string::npos; }, 30));
  }
  auto all = [&] {
    std::string s;
    for (int i = 0; i < 3; ++i) s += "node " + std::to_string(i) + ":\n" + p[i]->output() + "\n";
    return s;
  };
  const bool up = wait_until(
      [&] {
        int n = 0;
        for (auto& x : p) n += x->output().find(" up") != std::string::npos;
        return n == 2;
      },
      30);
  INFO(all());
  REQUIRE(up);
  // The victim is node rank 0: the spare must take that rank, not the
  // survivor moving up to it.
  int spare = -1, victim = -1, survivor = -1;
  for (int i = 0; i < 3; ++i)
    (!active(*p[i]) ? spare : p[i]->output().find("this is node 0") != std::string::npos ? victim : survivor) = i;
  REQUIRE(spare >= 0);
  REQUIRE(victim >= 0);
  REQUIRE(survivor >= 0);
  const std::string victim_rank = "0";
  p[victim]->signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const bool took_over = wait_until([&] { return p[spare]->output().find("round 1: this is node") != std::string::npos; }, 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  const auto cs = p[spare]->wait(30), cv = p[survivor]->wait(30);
  INFO(all() << "spare took over after " << took << " s");
  REQUIRE(took_over);
  // keep_alive_interval x keep_alive_max_attempt = 1 s, plus one round:
  // the survivor's workers' teardown and the join.
  CHECK(took < 1.0 + 3.0);
  CHECK(cs == std::optional<int>(0));
  CHECK(cv == std::optional<int>(0));
  // The spare holds the lost node's rank; the world size is what it was.
  CHECK_THAT(p[spare]->output(), Catch::Contains("round 1: this is node " + victim_rank + " of 2") &&
                                     Catch::Contains("round-1 rank " + victim_rank + " of 2 node " + victim_rank));
  // Every node's log and run summary say who replaced whom.
  const std::string victim_pid = std::to_string(p[victim]->pid());
  for (int i : {spare, survivor}) {
    CHECK_THAT(p[i]->output(), Catch::Contains("round 1: node n" + victim_rank + " is host ") &&
                                   Catch::Contains("a hot spare, in place of host ") &&
                                   Catch::Contains("(pid " + victim_pid + "), which did not come back"));
    CHECK_THAT(p[i]->output(), Catch::Contains("node n" + victim_rank + ": host ") &&
                                   Catch::Contains("a hot spare, replaced host"));
  }
}

TEST_CASE("hot spares: four agents for --nnodes 2 --hot_spares 1 (NVRx #348): the job goes on and ends 0, the "
          "spare ends 0 unneeded, the fourth is told at once") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(5);
  auto store = store_node(nodes, "spare-348");
  std::vector<std::unique_ptr<Proc>> p;
  for (int i = 0; i < 4; ++i) p.push_back(launcher(nodes, i, "spare-348", "echo \"rank $RANK up\"; sleep 2"));
  std::vector<std::optional<int>> codes;
  for (auto& x : p) codes.push_back(x->wait(60));
  std::string all;
  for (int i = 0; i < 4; ++i) all += "node " + std::to_string(i) + ":\n" + p[i]->output() + "\n";
  INFO(all);
  int ran = 0, unneeded = 0, surplus = 0;
  for (int i = 0; i < 4; ++i) {
    const std::string out = p[i]->output();
    if (active(*p[i])) {
      ++ran;
      CHECK(codes[i] == std::optional<int>(0));
      CHECK_THAT(out, Catch::Contains("this is node") && Catch::Contains(" of 2,"));
    } else if (out.find("while this node stood by as a hot spare (--hot_spares 1): not needed") != std::string::npos) {
      ++unneeded;
      CHECK(codes[i] == std::optional<int>(0));
    } else {
      ++surplus;
      CHECK(codes[i] == std::optional<int>(1));
      CHECK_THAT(out, Catch::Contains("1 hot spares stand by (--hot_spares 1); this node is not needed"));
    }
  }
  CHECK(ran == 2);
  CHECK(unneeded == 1);
  CHECK(surplus == 1);
}
