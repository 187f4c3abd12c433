// The c10d rendezvous' single point of failure, tested: two ddp-launch
// nodes in network namespaces (netns.h) meet at node 0's store; node 0's
// rendezvous helper (ddp-rdzv, which hosts the store) is killed while the
// workers run. Both nodes end within the keep-alive timeout (plus the
// workers' teardown), each with a line that names the store's host and
// suggests --rdzv_backend etcd-v3. Then the host unreachable without a
// word (its link down: no reset, no answer): the other node ends within the
// keep-alive timeout too. About 1 s and 4 s. Skipped (77) without root.
#include "netns.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <dirent.h>
#include <fstream>
#include <memory>
#include <sstream>

using namespace ddp::test;

namespace {

// The pid of the process named `name` among pid's descendants (0: none).
pid_t descendant(pid_t pid, const std::string& name) {
  std::ifstream children("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  for (pid_t c; children >> c;) {
    std::ifstream comm("/proc/" + std::to_string(c) + "/comm");
    std::string n;
    std::getline(comm, n);
    if (n == name) return c;
    if (const pid_t d = descendant(c, name)) return d;
  }
  return 0;
}

std::vector<std::string> launch(const NetNodes& nodes, int i, const std::string& id) {
  return nodes.exec(i, {bin_path("ddp-launch"), "--nnodes=2", "--use_env", "--no_python", "--rdzv_backend=c10d",
                        "--rdzv_endpoint=" + nodes.address(0) + ":29400", "--rdzv_id=" + id, "--shutdown_timeout=2",
                        "--rdzv_conf=join_timeout=30,keep_alive_interval=1,keep_alive_max_attempt=2", "/bin/sh",
                        "-c", "echo \"rank $RANK up\"; exec sleep 60"});
}

// Node 0 (the store's host, so node rank 0), then node 1; returns when
// both nodes' workers run.
std::pair<std::unique_ptr<Proc>, std::unique_ptr<Proc>> start_both(const NetNodes& nodes, const std::string& id) {
  const std::map<std::string, std::string> env{{"OMP_NUM_THREADS", "1"}};
  auto a = std::make_unique<Proc>(launch(nodes, 0, id), env);
  REQUIRE(wait_until([&] { return a->output().find("joining the rendezvous") != std::string::npos; }, 30));
  auto b = std::make_unique<Proc>(launch(nodes, 1, id), env);
  const bool running = wait_until(
      [&] { return a->output().find("rank 0 up") != std::string::npos && b->output().find("rank 1 up") != std::string::npos; },
      30);
  INFO("node 0:\n" << a->output() << "\nnode 1:\n" << b->output());
  REQUIRE(running);
  return {std::move(a), std::move(b)};
}

}  // namespace

TEST_CASE("c10d: the rendezvous host's helper killed mid-run: every node ends within the keep-alive timeout, "
          "naming the host and suggesting etcd-v3") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  const std::string host = nodes.address(0);
  auto [pa, pb] = start_both(nodes, "host-loss");
  Proc& a = *pa;
  Proc& b = *pb;
  const pid_t helper = descendant(a.pid(), "ddp-rdzv");
  REQUIRE(helper > 0);
  ::kill(helper, SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  // keep_alive_interval * keep_alive_max_attempt = 2 s, plus the
  // workers' teardown (SIGTERM ends sleep at once).
  const auto ca = a.wait(10), cb = b.wait(10);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  INFO("node 0:\n" << a.output() << "\nnode 1:\n" << b.output());
  REQUIRE(ca);
  REQUIRE(cb);
  CHECK(*ca != 0);
  CHECK(*cb != 0);
  CHECK(took < 4.0);
  for (const std::string& out : {a.output(), b.output()}) {
    CHECK_THAT(out, Catch::Contains(host + ":29400"));
    CHECK_THAT(out, Catch::Contains("--rdzv_backend etcd-v3"));
  }
}

TEST_CASE("c10d: the rendezvous host unreachable mid-run (its link down, no answer at all): the other node ends "
          "within the keep-alive timeout, naming the host") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(2);
  const std::string host = nodes.address(0);
  auto [pa, pb] = start_both(nodes, "host-gone");
  Proc& b = *pb;  // node 0 (pa) goes on: its store is fine, only cut off
  REQUIRE(run({"ip", "-n", nodes.name(0), "link", "set", "eth0", "down"}, {}, 10).exit_code == 0);
  const auto gone = std::chrono::steady_clock::now();
  const auto cb = b.wait(20);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - gone).count();
  INFO("node 1:\n" << b.output());
  REQUIRE(cb);
  CHECK(*cb != 0);
  // keep_alive_interval * keep_alive_max_attempt = 2 s, one tick, the teardown.
  CHECK(took < 5.0);
  CHECK_THAT(b.output(), Catch::Contains("the rendezvous store at " + host + ":29400 stopped answering"));
  CHECK_THAT(b.output(), Catch::Contains("--rdzv_backend etcd-v3"));
}
