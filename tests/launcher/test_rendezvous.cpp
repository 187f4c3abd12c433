// The c10d rendezvous (launcher/rdzv/rendezvous.cpp) over an in-process
// store (store_server.h, on a free port of this machine): node ranks, base
// ranks and the workers' store, with the order in which nodes join forced,
// which the multi-process tests cannot do.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <thread>

#include "rendezvous.h"
#include "store_server.h"

using ddp::rdzv::Config;
using ddp::rdzv::Rendezvous;
using ddp::rdzv::Round;
using ddp::rdzv::StoreClient;
using ddp::rdzv::StoreServer;

namespace {

Config node(const std::string& name, int nproc, bool hosts_store) {
  Config c;
  c.endpoint = "store:29400";
  c.run_id = "unit";
  c.min_nodes = c.max_nodes = 2;
  c.nproc = nproc;
  c.local_addr = name + "-addr";
  c.hostname = name;
  c.hosts_store = hosts_store;
  c.join_timeout_s = 20;
  c.last_call_timeout_s = 0.2;
  c.close_timeout_s = 20;
  c.keep_alive_interval_s = 0.1;
  return c;
}

bool idle(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return true;
}

// The store one node hosts, and a connection to it for each node (as each
// node's helper has its own).
struct Store {
  StoreServer server{0, "test"};
  StoreClient connect() {
    return StoreClient("localhost", server.port(), std::chrono::seconds(5), std::chrono::seconds(20), "test");
  }
};

long long joined(StoreClient& store, int round) {
  return store.add("/ddp-rdzv/unit/r" + std::to_string(round) + "/joined", 0);
}

// Starts `first`'s join, waits until the store has counted it, then joins `second`.
std::pair<Round, Round> join_in_order(StoreClient& store, Rendezvous& first, Rendezvous& second, int round) {
  auto a = std::async(std::launch::async, [&] { return first.join(idle); });
  while (joined(store, round) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto b = std::async(std::launch::async, [&] { return second.join(idle); });
  return {a.get(), b.get()};
}

}  // namespace

TEST_CASE("rendezvous: the node that hosts the store is node 0 of the first round even when it joins last") {
  Store s;
  StoreClient gc = s.connect(), hc = s.connect(), look = s.connect();
  Rendezvous guest(gc, node("guest", 3, false), [] { return 1111; });
  Rendezvous host(hc, node("host", 2, true), [] { return 2222; });
  const auto [g, h] = join_in_order(look, guest, host, 0);
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

TEST_CASE("rendezvous: without the store's host, newcomers take node ranks in join order") {
  Store s;
  StoreClient ac = s.connect(), bc = s.connect(), look = s.connect();
  Rendezvous a(ac, node("a", 1, false), [] { return 1111; });
  Rendezvous b(bc, node("b", 1, false), [] { return 2222; });
  const auto [ra, rb] = join_in_order(look, a, b, 0);
  CHECK(ra.group_rank == 0);
  CHECK(rb.group_rank == 1);
  CHECK(ra.master_addr == "a-addr");
  CHECK(rb.master_port == 1111);
}

TEST_CASE("rendezvous: a node keeps its node rank in later rounds, ahead of a store host that joined later") {
  Store s;
  StoreClient gc = s.connect(), hc = s.connect(), look = s.connect();
  // --nnodes 1:2: the guest starts alone as node 0; the node that hosts the
  // store arrives during round 0 and is a newcomer of round 1.
  Config one_or_two = node("guest", 1, false);
  one_or_two.min_nodes = 1;
  Rendezvous guest(gc, one_or_two, [] { return 1111; });
  const Round g0 = guest.join(idle);
  CHECK(g0.group_world_size == 1);
  CHECK(g0.group_rank == 0);

  Config host_cfg = node("host", 1, true);
  host_cfg.min_nodes = 1;
  Rendezvous host(hc, host_cfg, [] { return 2222; });
  auto h1 = std::async(std::launch::async, [&] { return host.join(idle); });
  while (joined(look, 1) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // The guest's next tick stops its workers for the newcomer, uncounted.
  const auto stop = guest.tick();
  REQUIRE(stop);
  CHECK_FALSE(stop->counted);
  CHECK_THAT(stop->reason, Catch::Contains("node host (pid") && Catch::Contains("is waiting to join"));
  const Round g1 = guest.join(idle);
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
  const auto [h2, g2] = join_in_order(look, host, guest, 2);
  CHECK(g2.group_rank == 0);
  CHECK(h2.group_rank == 1);
  CHECK(g2.restart_count == 1);
  CHECK(h2.master_port == 1111);
}

TEST_CASE("rendezvous: a node whose launcher is silent longer than keep_alive_interval x keep_alive_max_attempt "
          "sends no heartbeat and ends the round as a node lost, named") {
  Store s;
  StoreClient gc = s.connect(), hc = s.connect(), store = s.connect();
  Rendezvous guest(gc, node("guest", 1, false), [] { return 1111; });
  Rendezvous host(hc, node("host", 1, true), [] { return 2222; });
  const auto [g, h] = join_in_order(store, guest, host, 0);
  REQUIRE(g.group_rank == 1);
  // The limit is 0.1 s x 3: a launcher silent for less goes on.
  CHECK_FALSE(guest.tick(0.2));
  const std::string beats_key = "/ddp-rdzv/unit/r0/hb/1";
  const long long beats = store.add(beats_key, 0);
  idle(150);  // a heartbeat is due again (keep_alive_interval 0.1 s)
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
