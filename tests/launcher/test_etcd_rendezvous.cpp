// --rdzv_backend etcd-v3 end to end: a 3-member etcd cluster (Debian's
// etcd-server, started by the test) and two ddp-launch nodes, each in a
// network namespace of its own (netns.h). The etcd leader is killed while
// the nodes meet, and the next leader while their workers run: the job goes
// on and both nodes succeed. About 8 s (the cluster's start, one election
// per kill, workers that sleep 3 s). Skipped (77) without etcd or root.
#include "etcd_cluster.h"
#include "netns.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

using namespace ddp::test;

namespace {

std::vector<std::string> etcd_launch(const NetNodes& nodes, int i, const std::string& endpoints) {
  return nodes.exec(i, {bin_path("ddp-launch"), "--nnodes=2", "--use_env", "--no_python", "--rdzv_backend=etcd-v3",
                        "--rdzv_endpoint=" + endpoints, "--rdzv_id=etcd-job", "--shutdown_timeout=5",
                        "--rdzv_conf=join_timeout=60,keep_alive_interval=2,read_timeout=20", "/bin/sh", "-c",
                        "echo \"rank $RANK of $WORLD_SIZE\"; sleep 3; echo \"rank $RANK done\""});
}

}  // namespace

TEST_CASE("etcd-v3 rendezvous: the etcd leader killed while 2 nodes meet, the next one while they run: the job "
          "goes on") {
  if (auto why = NetNodes::unavailable_reason()) DDP_SKIP(*why);
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  NetNodes nodes(5);  // 0..2: etcd members, 3 and 4: the job's nodes
  EtcdCluster etcd(nodes, 3);
  const int first = etcd.leader();
  REQUIRE(first >= 0);
  // The leader first: the nodes talk to it until it dies.
  std::string endpoints = etcd.endpoint(first);
  for (int i = 0; i < 3; ++i)
    if (i != first) endpoints += "," + etcd.endpoint(i);
  const std::map<std::string, std::string> env{{"OMP_NUM_THREADS", "1"}};

  Proc a(etcd_launch(nodes, 3, endpoints), env);
  // Node a has joined round 0 and waits for the other: kill the leader.
  const int other = (first + 1) % 3;
  const bool joined = wait_until(
      [&] {
        return run(nodes.exec(other, {"etcdctl", "--endpoints=" + etcd.endpoint(other), "get", "--print-value-only",
                                      "/ddp-rdzv/etcd-job/r0/node/0"}),
                   {}, 5)
                   .output.find(nodes.address(3)) != std::string::npos;
      },
      30);
  INFO("node a:\n" << a.output());
  REQUIRE(joined);
  etcd.kill(first);
  Proc b(etcd_launch(nodes, 4, endpoints), env);
  INFO("node b:\n" << b.output());
  const bool running = wait_until(
      [&] {
        return a.output().find("rank 0 of 2") != std::string::npos && b.output().find("rank 1 of 2") != std::string::npos;
      },
      30);
  REQUIRE(running);
  // The first leader back as a follower (3 members again), then the
  // current leader killed while the workers sleep.
  etcd.restart(first);
  const bool back = wait_until(
      [&] {
        return run(nodes.exec(first, {"etcdctl", "--endpoints=" + etcd.endpoint(first), "--command-timeout=1s",
                                      "endpoint", "health"}),
                   {}, 5)
                   .exit_code == 0;
      },
      20);
  REQUIRE(back);
  const int second = etcd.leader();
  REQUIRE(second >= 0);
  CHECK(second != first);
  etcd.kill(second);
  const auto ca = a.wait(60), cb = b.wait(60);
  INFO("node a:\n" << a.output() << "\nnode b:\n" << b.output());
  CHECK(ca == 0);
  CHECK(cb == 0);
  CHECK_THAT(a.output(), Catch::Contains("rank 0 done"));
  CHECK_THAT(b.output(), Catch::Contains("rank 1 done"));
}
