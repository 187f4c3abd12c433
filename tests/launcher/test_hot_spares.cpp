// Hot spare nodes (--hot_spares, issue 52 item 3) in process: nodes are
// threads over one MemoryStore on a fake clock, as in test_rendezvous.cpp,
// so which node joins first, which one leaves and when are forced. A spare
// stands by while a round runs (no join_timeout), takes the node rank of a
// node that left in the next round at once, and the world size stays; a
// failure with every node back leaves the spares standing by; more agents
// than the nodes and spares never close the rendezvous (NVRx #348). About
// 2 s in all (a spare's store wait is a second of real time).
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "memory_store.h"
#include "rdzv_fake_clock.h"
#include "rdzv_test_nodes.h"
#include "rendezvous.h"

using ddp::rdzv::Config;
using ddp::rdzv::MemoryStore;
using ddp::rdzv::Rendezvous;
using ddp::rdzv::RendezvousError;
using ddp::rdzv::Round;
using ddp::rdzv::SpareNotNeeded;
using ddp::rdzv::testing::FakeClock;
using namespace std::chrono_literals;

namespace {

using ddp::rdzv::testing::on_change;
using ddp::rdzv::testing::time_passes;

// --nnodes 2 --hot_spares 1, two workers a node, keep-alive 0.1 s x 3; a
// last call long enough never to close a round in these cases.
Config node(const std::string& name, int spares = 1) {
  Config c = ddp::rdzv::testing::unit_node("spares", name, 2, false);
  c.hot_spares = spares;
  c.last_call_timeout_s = 30;
  return c;
}

std::string key(int round, const std::string& k) { return "/ddp-rdzv/spares/r" + std::to_string(round) + "/" + k; }

// Two nodes a (node rank 0: joined first) and b (node rank 1) in round 0,
// then spare s standing by in round 1 (its join runs on a thread).
struct Job {
  MemoryStore store;
  FakeClock clock;
  Rendezvous a{store, node("a"), [] { return 1111; }, clock.now()};
  Rendezvous b{store, node("b"), [] { return 2222; }, clock.now()};
  Rendezvous s{store, node("s"), [] { return 3333; }, clock.now()};
  Round ra, rb;
  std::future<Round> spare;

  Job() {
    auto ja = std::async(std::launch::async, [&] { return a.join(on_change(store)); });
    REQUIRE(store.wait(key(0, "node/0"), 10s));
    rb = b.join(on_change(store));
    ra = ja.get();
    REQUIRE(ra.group_rank == 0);
    REQUIRE(rb.group_rank == 1);
    spare = std::async(std::launch::async, [this] { return s.join(on_change(store)); });
    REQUIRE(store.wait(key(1, "node/0"), 10s));
  }
  bool spare_waiting() { return spare.wait_for(50ms) == std::future_status::timeout; }
};

}  // namespace

TEST_CASE("hot spares: node n0 leaves, the spare takes node rank 0 in the next round at once, node n1 keeps its "
          "rank, the world size stays, and the round names who replaced whom") {
  Job j;
  // Only b ticks: a is gone. b watches n0 (its ring's next), silent for
  // more than 0.1 s x 3 on the clock.
  CHECK_FALSE(j.b.tick());
  std::optional<ddp::rdzv::Stop> stop;
  for (int i = 0; i < 5 && !stop; ++i) {
    CHECK(j.spare_waiting());
    j.clock.advance(100ms);
    stop = j.b.tick();
  }
  REQUIRE(stop);
  CHECK_THAT(stop->reason, Catch::StartsWith("node n0 (pid ") && Catch::Contains("host a)"));
  // No time passes from here: round 1 closes as soon as b is back (the
  // round knows one of round 0's two nodes left), not a timeout later.
  const Round b1 = j.b.join(on_change(j.store));
  const Round s1 = j.spare.get();
  CHECK(b1.round == 1);
  CHECK(b1.group_rank == 1);
  CHECK(b1.base_rank == 2);
  CHECK(s1.group_rank == 0);
  CHECK(s1.base_rank == 0);
  for (const Round& r : {b1, s1}) {
    CHECK(r.group_world_size == 2);
    CHECK(r.world_size == 4);  // as in round 0
    CHECK(r.restart_count == 1);
    CHECK(r.master_addr == "s-addr");  // node rank 0's
    CHECK_THAT(r.replaced, Catch::StartsWith("0:s:") && Catch::Contains(":a:"));
  }
}

TEST_CASE("hot spares: a failure with every node alive: both come back (in either order) with their ranks, and "
          "the spare stands by until the job ends, then is told it was not needed") {
  Job j;
  CHECK(j.a.fail("rank 3 exited with 1").counted);
  REQUIRE(j.b.tick());
  // b rejoins first: the spare and b fill round 1's two places, but a,
  // which is back too, keeps its place and the spare stays a spare.
  auto b1 = std::async(std::launch::async, [&] { return j.b.join(on_change(j.store)); });
  REQUIRE(j.store.wait(key(1, "node/1"), 10s));
  const Round a1 = j.a.join(on_change(j.store));
  CHECK(a1.group_rank == 0);
  CHECK(b1.get().group_rank == 1);
  CHECK(a1.replaced.empty());
  CHECK(j.spare_waiting());
  auto done_a = std::async(std::launch::async, [&] { return j.a.done(on_change(j.store)); });
  CHECK(j.b.done(on_change(j.store)).empty());
  CHECK(done_a.get().empty());
  CHECK_THROWS_AS(j.spare.get(), SpareNotNeeded);
}

TEST_CASE("hot spares: a spare waits beyond join_timeout while the job runs, and still takes a place") {
  Job j;
  // 25 s of the clock (join_timeout 20 s), both nodes beating.
  for (int i = 0; i < 250; ++i) {
    j.clock.advance(100ms);
    REQUIRE_FALSE(j.a.tick());
    REQUIRE_FALSE(j.b.tick());
  }
  // The spare's store wait (a second of real time at most) ends, and it
  // looks at the clock again.
  std::this_thread::sleep_for(1100ms);
  CHECK(j.spare_waiting());
  CHECK(j.b.fail("node b's GPU fell off the bus").counted);
  REQUIRE(j.a.tick());
  // b does not come back: a keep-alive timeout after round 0 ended, the
  // spare takes its place (a's idle lets that time pass).
  const Round a1 = j.a.join(time_passes(j.clock));
  const Round s1 = j.spare.get();
  CHECK(a1.group_rank == 0);
  CHECK(s1.group_rank == 1);
  CHECK(s1.world_size == 4);
  CHECK_THAT(s1.replaced, Catch::StartsWith("1:s:") && Catch::Contains(":b:"));
}

TEST_CASE("hot spares: more agents than the nodes and spares (NVRx #348): the surplus one is told at once, the "
          "job goes on") {
  Job j;
  Rendezvous extra(j.store, node("x"), [] { return 4444; }, j.clock.now());
  CHECK_THROWS_WITH(extra.join(on_change(j.store)),
                    Catch::Contains("round 0 runs with 2 nodes and 1 hot spares stand by (--hot_spares 1); this node "
                                    "is not needed"));
  CHECK_FALSE(j.a.tick());
  CHECK_FALSE(j.b.tick());
  // A node then leaves: the spare, not the surplus node's slot, takes it.
  CHECK(j.a.fail("node a's workers exited").counted);
  REQUIRE(j.b.tick());
  const Round b1 = j.b.join(time_passes(j.clock));
  const Round s1 = j.spare.get();
  CHECK(b1.group_rank == 1);
  CHECK(s1.group_rank == 0);
  CHECK(s1.group_world_size == 2);
}

TEST_CASE("hot spares: without --hot_spares, an agent beyond --nnodes waits for a place and closes nothing: the "
          "job goes on and ends, then the agent is told (NVRx #348)") {
  MemoryStore store;
  FakeClock clock;
  std::vector<std::unique_ptr<Rendezvous>> nodes;
  for (const char* name : {"a", "b", "c"})
    nodes.push_back(std::make_unique<Rendezvous>(store, node(name, 0), [] { return 1111; }, clock.now()));
  std::vector<std::future<Round>> joins;
  for (auto& n : nodes) joins.push_back(std::async(std::launch::async, [&n, &store] { return n->join(on_change(store)); }));
  // Two of the three run round 0; the third waits for round 1.
  REQUIRE(store.wait(key(1, "node/0"), 10s));
  std::vector<int> running;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (running.size() < 2 && std::chrono::steady_clock::now() < until) {
    running.clear();
    for (int i = 0; i < 3; ++i)
      if (joins[i].wait_for(1ms) == std::future_status::ready) running.push_back(i);
  }
  REQUIRE(running.size() == 2);
  const int late = 3 - running[0] - running[1];
  CHECK(joins[late].wait_for(50ms) == std::future_status::timeout);
  CHECK(store.try_get(key(0, "closed")).value_or("").rfind("2 ", 0) == 0);
  for (int i : running) joins[i].get();
  auto first = std::async(std::launch::async, [&] { return nodes[running[0]]->done(on_change(store)); });
  CHECK(nodes[running[1]]->done(on_change(store)).empty());
  CHECK(first.get().empty());
  CHECK_THROWS_WITH(joins[late].get(), Catch::Contains("the job already finished in round 0"));
}
