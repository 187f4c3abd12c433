// The c10d rendezvous (launcher/rdzv/rendezvous.cpp) in process: nodes are
// threads over one MemoryStore, time is a fake clock the test moves, so
// node ranks, base ranks, the workers' store and the keep-alive rules are
// checked with the order in which nodes join forced (which the
// multi-process tests cannot do), and without sleeping. One case runs the
// rendezvous over the real store server on a free port (the wire itself is
// test_rdzv_store.cpp's).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "memory_store.h"
#include "rdzv_fake_clock.h"
#include "rdzv_test_nodes.h"
#include "rendezvous.h"
#include "store_client.h"
#include "store_server.h"

using ddp::rdzv::Clock;
using ddp::rdzv::Config;
using ddp::rdzv::testing::FakeClock;
using ddp::rdzv::MemoryStore;
using ddp::rdzv::Rendezvous;
using ddp::rdzv::Round;
using ddp::rdzv::Store;
using ddp::rdzv::StoreClient;
using ddp::rdzv::StoreServer;
using namespace std::chrono_literals;

namespace {

using ddp::rdzv::testing::Idle;
using ddp::rdzv::testing::on_change;
using ddp::rdzv::testing::time_passes;

Config node(const std::string& name, int nproc, bool hosts_store) {
  return ddp::rdzv::testing::unit_node("unit", name, nproc, hosts_store);
}

std::string round_key(int round, const std::string& k) { return "/ddp-rdzv/unit/r" + std::to_string(round) + "/" + k; }

// Starts `first`'s join, waits until it has written its descriptor to the
// store, then joins `second`.
std::pair<Round, Round> join_in_order(Store& store, Rendezvous& first, const Idle& first_idle, Rendezvous& second,
                                      const Idle& second_idle, int round) {
  auto a = std::async(std::launch::async, [&] { return first.join(first_idle); });
  REQUIRE(store.wait(round_key(round, "node/0"), 10s));
  auto b = std::async(std::launch::async, [&] { return second.join(second_idle); });
  return {a.get(), b.get()};
}

// The guest (3 workers) joined first, the store's host (2 workers) second:
// the host is node 0 of round 0 all the same.
void check_host_is_node_0(const Round& g, const Round& h) {
  CHECK(h.group_rank == 0);
  CHECK(h.base_rank == 0);
  CHECK(g.group_rank == 1);
  CHECK(g.base_rank == 2);  // after the host's 2 workers
  for (const Round& r : {g, h}) {
    CHECK(r.round == 0);
    CHECK(r.group_world_size == 2);
    CHECK(r.world_size == 5);
    CHECK(r.restart_count == 0);
    // Node 0 picks the workers' store: its address and its port.
    CHECK(r.master_addr == "host-addr");
    CHECK(r.master_port == 2222);
  }
}

}  // namespace

TEST_CASE("rendezvous: the node that hosts the store is node 0 of the first round even when it joins last") {
  MemoryStore store;
  FakeClock clock;
  Rendezvous guest(store, node("guest", 3, false), [] { return 1111; }, clock.now());
  Rendezvous host(store, node("host", 2, true), [] { return 2222; }, clock.now());
  const auto [g, h] = join_in_order(store, guest, on_change(store), host, on_change(store), 0);
  check_host_is_node_0(g, h);
}

TEST_CASE("rendezvous: over the real store server, each node on its own connection") {
  StoreServer server{0, "test"};
  auto connect = [&] { return StoreClient("localhost", server.port(), 5s, 20s, "test"); };
  StoreClient gc = connect(), hc = connect(), look = connect();
  Rendezvous guest(gc, node("guest", 3, false), [] { return 1111; });
  Rendezvous host(hc, node("host", 2, true), [] { return 2222; });
  // Real time, and the nodes poll the store without a pause: no time rule
  // is at stake, only the requests on the wire.
  const Idle poll = [](int) {
    std::this_thread::yield();
    return true;
  };
  const auto [g, h] = join_in_order(look, guest, poll, host, poll, 0);
  check_host_is_node_0(g, h);
}

TEST_CASE("rendezvous: without the store's host, newcomers take node ranks in join order") {
  MemoryStore store;
  FakeClock clock;
  Rendezvous a(store, node("a", 1, false), [] { return 1111; }, clock.now());
  Rendezvous b(store, node("b", 1, false), [] { return 2222; }, clock.now());
  const auto [ra, rb] = join_in_order(store, a, on_change(store), b, on_change(store), 0);
  CHECK(ra.group_rank == 0);
  CHECK(rb.group_rank == 1);
  CHECK(ra.master_addr == "a-addr");
  CHECK(rb.master_port == 1111);
}

TEST_CASE("rendezvous: a node keeps its node rank in later rounds, ahead of a store host that joined later") {
  MemoryStore store;
  FakeClock clock;
  // --nnodes 1:2: the guest starts alone as node 0 (after last_call_timeout
  // on the fake clock); the node that hosts the store arrives during round
  // 0 and is a newcomer of round 1.
  Config one_or_two = node("guest", 1, false);
  one_or_two.min_nodes = 1;
  Rendezvous guest(store, one_or_two, [] { return 1111; }, clock.now());
  const Round g0 = guest.join(time_passes(clock));
  CHECK(g0.group_world_size == 1);
  CHECK(g0.group_rank == 0);

  Config host_cfg = node("host", 1, true);
  host_cfg.min_nodes = 1;
  Rendezvous host(store, host_cfg, [] { return 2222; }, clock.now());
  const Idle host_idle = on_change(store);
  auto h1 = std::async(std::launch::async, [&] { return host.join(host_idle); });
  REQUIRE(store.wait(round_key(1, "node/0"), 10s));
  // The guest's next tick stops its workers for the newcomer, uncounted.
  const auto stop = guest.tick();
  REQUIRE(stop);
  CHECK_FALSE(stop->counted);
  CHECK_THAT(stop->reason, Catch::Contains("node host (pid") && Catch::Contains("is waiting to join"));
  // No time passes while both are in round 1's rendezvous: the host cannot
  // close it alone after last_call_timeout.
  const Round g1 = guest.join(on_change(store));
  const Round h = h1.get();
  CHECK(g1.round == 1);
  CHECK(g1.group_rank == 0);
  CHECK(h.group_rank == 1);
  CHECK(g1.restart_count == 0);
  CHECK(h.master_addr == "guest-addr");

  // A failure: both rejoin, the host first this time; the ranks stay.
  const auto failed = host.fail("rank 1 exited with 1");
  CHECK(failed.counted);
  const auto seen = guest.tick();
  REQUIRE(seen);
  CHECK(seen->reason == "rank 1 exited with 1");
  const auto [h2, g2] = join_in_order(store, host, on_change(store), guest, on_change(store), 2);
  CHECK(g2.group_rank == 0);
  CHECK(h2.group_rank == 1);
  CHECK(g2.restart_count == 1);
  CHECK(h2.master_port == 1111);
}

TEST_CASE("rendezvous: a node whose launcher is silent longer than keep_alive_interval x keep_alive_max_attempt "
          "sends no heartbeat and ends the round as a node lost, named") {
  MemoryStore store;
  FakeClock clock;
  Rendezvous guest(store, node("guest", 1, false), [] { return 1111; }, clock.now());
  Rendezvous host(store, node("host", 1, true), [] { return 2222; }, clock.now());
  const auto [g, h] = join_in_order(store, guest, on_change(store), host, on_change(store), 0);
  REQUIRE(g.group_rank == 1);
  // The limit is 0.1 s x 3: a launcher silent for less goes on.
  CHECK_FALSE(guest.tick(0.2));
  const std::string beats_key = round_key(0, "hb/1");
  const long long beats = store.add(beats_key, 0);
  clock.advance(150ms);  // a heartbeat is due again (keep_alive_interval 0.1 s)
  const auto stop = guest.tick(0.5);
  REQUIRE(stop);
  CHECK(stop->counted);
  CHECK_THAT(stop->reason, Catch::StartsWith("node n1 (pid ") && Catch::Contains("host guest)") &&
                               Catch::Contains("left during round 0") &&
                               Catch::Contains("its launcher has not answered its rendezvous helper"));
  CHECK(store.add(beats_key, 0) == beats);  // no heartbeat for a launcher that is gone
  // The other node stops for the same reason.
  const auto seen = host.tick();
  REQUIRE(seen);
  CHECK(seen->reason == stop->reason);
}

TEST_CASE("rendezvous: a node whose peer's heartbeat stops for keep_alive_interval x keep_alive_max_attempt "
          "on the clock ends the round, naming the peer") {
  MemoryStore store;
  FakeClock clock;
  Rendezvous guest(store, node("guest", 1, false), [] { return 1111; }, clock.now());
  Rendezvous host(store, node("host", 1, true), [] { return 2222; }, clock.now());
  join_in_order(store, guest, on_change(store), host, on_change(store), 0);
  CHECK_FALSE(host.tick());  // sees the guest's first beat
  clock.advance(200ms);
  CHECK_FALSE(host.tick());  // 0.2 s without a beat: within 0.3 s
  clock.advance(150ms);
  const auto stop = host.tick();
  REQUIRE(stop);
  CHECK(stop->counted);
  CHECK_THAT(stop->reason, Catch::StartsWith("node n1 (pid ") && Catch::Contains("host guest)") &&
                               Catch::Contains("left during round 0 (no heartbeat for"));
}

TEST_CASE("rendezvous: a round that never fills ends at join_timeout on the clock, saying how many joined") {
  MemoryStore store;
  FakeClock clock;
  Rendezvous alone(store, node("alone", 1, false), [] { return 1111; }, clock.now());
  CHECK_THROWS_WITH(alone.join(time_passes(clock)),
                    Catch::StartsWith("rendezvous at store:29400 (rdzv_id unit): 1/2 nodes joined after 20 s"));
}

TEST_CASE("rendezvous: a torchrun node at the store's host ends a join that does not complete within 30 s, for "
          "every node, naming it (issue 51 item 10)") {
  MemoryStore store;
  FakeClock clock;
  Config c = node("host", 1, true);
  c.join_timeout_s = 600;
  Rendezvous host(store, c, [] { return 1111; }, clock.now());
  const auto start = clock.now()();
  host.tcpstore_client("a torchrun node (torch 2.x TCPStore client) at 10.0.0.9");
  CHECK_THROWS_WITH(host.join(time_passes(clock)),
                    Catch::StartsWith("rendezvous at store:29400 (rdzv_id unit): a torchrun node (torch 2.x TCPStore "
                                      "client) at 10.0.0.9 tried to join 30 s ago, and 1/2 nodes joined; ddp-launch "
                                      "and torchrun nodes cannot join one rendezvous"));
  CHECK(clock.now()() - start < std::chrono::seconds(31));  // not join_timeout's 600 s
  // The other nodes end with the same reason.
  CHECK_THAT(store.try_get("/ddp-rdzv/unit/abort").value_or(""), Catch::Contains("a torchrun node"));
}

TEST_CASE("rendezvous: a torchrun node seen while the round fills anyway is a stray: the job goes on") {
  MemoryStore store;
  FakeClock clock;
  Rendezvous host(store, node("host", 2, true), [] { return 2222; }, clock.now());
  Rendezvous guest(store, node("guest", 3, false), [] { return 1111; }, clock.now());
  host.tcpstore_client("a torchrun node (torch 2.x TCPStore client) at 10.0.0.9");
  const auto [g, h] = join_in_order(store, guest, on_change(store), host, on_change(store), 0);
  check_host_is_node_0(g, h);
}

TEST_CASE("rendezvous: a malformed number in the store names its key and value, and is no lost store "
          "(issue 51 item 8)") {
  MemoryStore store;
  FakeClock clock;
  Config c = node("alone", 1, false);
  c.min_nodes = c.max_nodes = 1;
  SECTION("the run's round") {
    store.set("/ddp-rdzv/unit/round", "x");
    Rendezvous alone(store, c, [] { return 1111; }, clock.now());
    CHECK_THROWS_WITH(alone.join(time_passes(clock)),
                      Catch::StartsWith("rendezvous at store:29400 (rdzv_id unit): the store's key /ddp-rdzv/unit/round "
                                        "holds 'x', which no ddp-launch node writes") &&
                          Catch::Contains("start the job with another --rdzv_id"));
  }
  SECTION("a round's close") {
    store.set(round_key(0, "closed"), "x 1");
    Rendezvous alone(store, c, [] { return 1111; }, clock.now());
    CHECK_THROWS_WITH(alone.join(time_passes(clock)), Catch::Contains("/ddp-rdzv/unit/r0/closed holds 'x 1'"));
  }
  SECTION("a counter: the store refuses the add, naming the value") {
    store.set(round_key(0, "joined"), "many");
    Rendezvous alone(store, c, [] { return 1111; }, clock.now());
    CHECK_THROWS_AS(alone.join(time_passes(clock)), ddp::rdzv::StoreRefused);
  }
}

TEST_CASE("rendezvous: of three nodes, the one whose heartbeat stops is named by its watcher (the node rank before "
          "it) and every node stops for that reason") {
  MemoryStore store;
  FakeClock clock;
  std::vector<std::unique_ptr<Rendezvous>> nodes;
  for (const char* name : {"a", "b", "c"}) {
    Config c = node(name, 1, false);
    c.min_nodes = c.max_nodes = 3;
    nodes.push_back(std::make_unique<Rendezvous>(store, c, [] { return 1111; }, clock.now()));
  }
  std::vector<std::future<Round>> joins;
  for (auto& n : nodes) joins.push_back(std::async(std::launch::async, [&n, &store] { return n->join(on_change(store)); }));
  std::vector<Rendezvous*> by_rank(3);
  for (std::size_t i = 0; i < joins.size(); ++i) by_rank.at(joins[i].get().group_rank) = nodes[i].get();
  // Node n2 stops beating; n0 and n1 go on (limit: 0.1 s x 3).
  for (Rendezvous* r : by_rank) CHECK_FALSE(r->tick());
  std::optional<ddp::rdzv::Stop> stop;
  for (int i = 0; i < 3 && !stop; ++i) {
    clock.advance(150ms);
    CHECK_FALSE(by_rank[0]->tick());
    stop = by_rank[1]->tick();
  }
  REQUIRE(stop);
  CHECK(stop->counted);
  CHECK_THAT(stop->reason, Catch::StartsWith("node n2 (pid ") && Catch::Contains("left during round 0 (no heartbeat for"));
  for (Rendezvous* r : {by_rank[0], by_rank[2]}) {
    const auto seen = r->tick();
    REQUIRE(seen);
    CHECK(seen->reason == stop->reason);
  }
}
