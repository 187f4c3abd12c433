// c10d rendezvous, the pure pieces: the helper's line protocol and the
// worker environment a round gives. The rendezvous itself runs against real
// processes in test_elastic.cpp and across network namespaces in
// tests/worker/test_multinode.cpp.
#include <catch2/catch.hpp>

#include "ddp/launcher/elastic/rdzv_agent.h"
#include "ddp/launcher/config/worker_env.h"

using namespace ddp::launcher;

TEST_CASE("the rendezvous helper's lines parse into events, and anything else is an error that quotes it") {
  RdzvEvent r = parse_rdzv_line("round 3 1 2 3 5 9 10.0.0.7 41234");
  REQUIRE(r.kind == RdzvEvent::Round);
  CHECK(r.round == 3);
  CHECK(r.restart_count == 1);
  CHECK(r.placement.group_rank == 2);
  CHECK(r.placement.group_world_size == 3);
  CHECK(r.placement.base_rank == 5);
  CHECK(r.placement.world_size == 9);
  CHECK(r.placement.master_addr == "10.0.0.7");
  CHECK(r.master_port == 41234);
  RdzvEvent s = parse_rdzv_line("restart 0 node h2 (pid 7) is waiting to join");
  CHECK(s.kind == RdzvEvent::Restart);
  CHECK(!s.counted);
  CHECK(s.text == "node h2 (pid 7) is waiting to join");
  CHECK(parse_rdzv_line("restart 1 rank 3 failed").counted);
  CHECK(parse_rdzv_line("abort no restarts left").kind == RdzvEvent::Abort);
  CHECK(parse_rdzv_line("aborted").kind == RdzvEvent::Aborted);
  RdzvEvent f = parse_rdzv_line("finished ");
  CHECK(f.kind == RdzvEvent::Finished);
  CHECK(f.text.empty());
  CHECK(parse_rdzv_line("error rendezvous at h:1: 1/2 nodes joined after 3 s").text ==
        "rendezvous at h:1: 1/2 nodes joined after 3 s");
  for (const char* bad : {"round 1 2", "restart x", "hello", ""}) {
    INFO(bad);
    RdzvEvent e = parse_rdzv_line(bad);
    CHECK(e.kind == RdzvEvent::Error);
    CHECK_THAT(e.text, Catch::Contains("unexpected") && Catch::Contains(std::string("'") + bad + "'"));
  }
}

TEST_CASE("a c10d round's placement sets the ranks, group and master, and nodes may run different counts") {
  LaunchOptions o;
  o.nnodes = 3;  // the options' own node count and rank are not used
  o.node_rank = 0;
  o.master_addr = "unused";
  GroupSpec g;
  g.opts = &o;
  g.nproc = 2;
  g.master_port = 41234;
  g.restart_count = 1;
  NodePlacement p;
  p.group_rank = 1;
  p.group_world_size = 2;
  p.base_rank = 3;  // node 0 runs 3 workers
  p.world_size = 5;
  p.master_addr = "10.0.0.7";
  g.placement = p;
  EnvMap env = worker_environment({}, g, 1, "e");
  CHECK(env["RANK"] == "4");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "5");
  CHECK(env["LOCAL_WORLD_SIZE"] == "2");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  CHECK(env["ROLE_RANK"] == "4");
  CHECK(env["ROLE_WORLD_SIZE"] == "5");
  CHECK(env["MASTER_ADDR"] == "10.0.0.7");
  CHECK(env["MASTER_PORT"] == "41234");
  CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "1");
  CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
}
