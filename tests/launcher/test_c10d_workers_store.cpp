// The workers' store of a c10d round, hosted by the round's node rank 0's
// launcher (TORCHELASTIC_USE_AGENT_STORE=True on every node, a fresh store
// and port each round), under real torch clients: two ddp-launch nodes in
// network namespaces (netns.h) running a Python init_process_group("gloo")
// job of the reference Python.
//  - rank 0 SIGKILLed in round 0, --max_restarts 1: both nodes meet again
//    and end 0, round 1 on another port of the same host; about 15 s.
//  - --nnodes 1:2, the rendezvous store in a third namespace (a bare
//    ddp-rdzv), the workers' store host's launcher SIGKILLed: the other node
//    becomes node rank 0 of the next round and serves its store; about 15 s.
// Skipped (77) without root or without the reference Python.
#include "netns.h"
#include "reference_python.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <memory>
#include <regex>

using namespace ddp::test;

namespace {

// Node i's launcher, meeting at the rendezvous store on node `rdzv`.
std::vector<std::string> launch(const NetNodes& nodes, int i, int rdzv, const std::string& nnodes,
                                const std::string& py, const std::string& id) {
  return nodes.exec(i, {bin_path("ddp-launch"), "--nnodes=" + nnodes, "--use_env", "--max_restarts=1",
                        "--rdzv_backend=c10d", "--rdzv_endpoint=" + nodes.address(rdzv) + ":29400", "--rdzv_id=" + id,
                        "--shutdown_timeout=5",
                        "--rdzv_conf=join_timeout=60,last_call_timeout=1,keep_alive_interval=0.5,keep_alive_max_attempt=4",
                        "--no_python", py, source_path("tests/launcher/scripts/gloo_store.py")});
}

// Node 0, then node 1 once node 0 says it joins (usually, not surely, node
// rank 0 then: the join itself comes after the line).
std::pair<std::unique_ptr<Proc>, std::unique_ptr<Proc>> start_both(const NetNodes& nodes, int rdzv,
                                                                   const std::string& nnodes, const std::string& py,
                                                                   const std::string& id,
                                                                   std::map<std::string, std::string> env) {
  // Gloo would otherwise pick the address the host name resolves to (loopback here).
  env["GLOO_SOCKET_IFNAME"] = "eth0";
  env["OMP_NUM_THREADS"] = "1";
  auto a = std::make_unique<Proc>(launch(nodes, 0, rdzv, nnodes, py, id), env);
  REQUIRE(wait_until([&] { return a->output().find("joining the rendezvous") != std::string::npos; }, 30));
  auto b = std::make_unique<Proc>(launch(nodes, 1, rdzv, nnodes, py, id), env);
  return {std::move(a), std::move(b)};
}

// Each round's workers' store as the launcher logged it: round -> "addr:port".
std::map<int, std::string> stores_of(const std::string& out) {
  std::map<int, std::string> m;
  const std::regex line("round (\\d+): this is node .* workers' store at ([^ ]+), restart count");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it)
    m[std::stoi((*it)[1])] = (*it)[2];
  return m;
}

}  // namespace

TEST_CASE("c10d workers' store: rank 0 SIGKILLed in round 0, the round's host serves a fresh store, "
          "both nodes end 0 on the launcher's store",
          "[torch]") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  NetNodes nodes(2);
  auto [a, b] = start_both(nodes, 0, "2", py, "agent-store", {{"KILL_RANK0_ONCE", "before_barrier"}});
  const auto ca = a->wait(120), cb = b->wait(60);
  INFO("node 0:\n" << a->output() << "\nnode 1:\n" << b->output());
  REQUIRE(ca == std::optional<int>(0));
  REQUIRE(cb == std::optional<int>(0));
  // Every rank of round 1 reduced through the launcher-hosted store.
  CHECK_THAT(a->output() + b->output(), Catch::Contains("rank 0 sum [3.0, 3.0, 3.0] agent True restart 1") &&
                                            Catch::Contains("rank 1 sum [3.0, 3.0, 3.0] agent True restart 1"));
  // Both nodes saw the same store each round, a fresh one in round 1.
  const auto sa = stores_of(a->output()), sb = stores_of(b->output());
  REQUIRE(sa.size() == 2);
  CHECK(sa == sb);
  CHECK(sa.at(0) != sa.at(1));
}

TEST_CASE("c10d workers' store: --nnodes 1:2, the host's launcher SIGKILLed, the other node hosts the next "
          "round's store and ends 0",
          "[torch]") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  NetNodes nodes(3);
  // Node 2 only hosts the rendezvous store (its helper, never joining; the
  // sleep holds its stdin open), so node 0 can be lost with the store kept.
  Proc store(nodes.exec(2, {"sh", "-c",
                            "sleep 300 | exec " + bin_path("ddp-rdzv") + " --host=" + nodes.address(2) +
                                " --port=29400 --id=agent-store-host --min=1 --max=2 --nproc=1 --is_host=1"}));
  auto [a, b] = start_both(nodes, 2, "1:2", py, "agent-store-host", {{"HOLD_FIRST_ROUND", "1"}});
  const bool held = wait_until(
      [&] { return a->output().find("holding") != std::string::npos && b->output().find("holding") != std::string::npos; },
      60);
  INFO("node 0:\n" << a->output() << "\nnode 1:\n" << b->output());
  REQUIRE(held);
  // Ranks follow join order, and "joining the rendezvous" is logged before
  // the join: under load node 1 may be first. The host is whichever node's
  // address the store has; the other one must take over.
  const auto s0 = stores_of(a->output());
  REQUIRE(s0.size() == 1);
  CHECK(stores_of(b->output()) == s0);
  const bool host_is_0 = s0.begin()->second.rfind(nodes.address(0) + ":", 0) == 0;
  CHECK_THAT(s0.begin()->second, Catch::StartsWith(nodes.address(host_is_0 ? 0 : 1) + ":"));
  Proc& host = host_is_0 ? *a : *b;
  Proc& other = host_is_0 ? *b : *a;
  host.signal(SIGKILL);
  const auto co = other.wait(60);
  INFO("surviving node " << (host_is_0 ? 1 : 0) << ":\n" << other.output());
  REQUIRE(co == std::optional<int>(0));
  CHECK_THAT(other.output(), Catch::Contains("this is node 0 of 1") &&
                                 Catch::Contains("rank 0 sum [1.0, 1.0, 1.0] agent True restart") &&
                                 Catch::Contains("addr " + nodes.address(host_is_0 ? 1 : 0)));
}
