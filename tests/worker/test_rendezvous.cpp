// The c10d rendezvous (launcher/rdzv/rendezvous.cpp) over an in-process
// store: node ranks, base ranks and the workers' store, with the order in
// which nodes join forced, which the multi-process tests cannot do; and a
// store that torchrun's rendezvous uses.
#include <catch2/catch.hpp>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <future>
#include <thread>

#include "rendezvous.h"

using ddp::rdzv::Config;
using ddp::rdzv::Rendezvous;
using ddp::rdzv::Round;

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

long long joined(c10d::Store& store, int round) {
  return store.add("/ddp-rdzv/unit/r" + std::to_string(round) + "/joined", 0);
}

// Starts `first`'s join, waits until the store has counted it, then joins `second`.
std::pair<Round, Round> join_in_order(c10d::Store& store, Rendezvous& first, Rendezvous& second, int round) {
  auto a = std::async(std::launch::async, [&] { return first.join(idle); });
  while (joined(store, round) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto b = std::async(std::launch::async, [&] { return second.join(idle); });
  return {a.get(), b.get()};
}

}  // namespace

TEST_CASE("rendezvous: the node that hosts the store is node 0 of the first round even when it joins last") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Rendezvous guest(*store, node("guest", 3, false), [] { return 1111; });
  Rendezvous host(*store, node("host", 2, true), [] { return 2222; });
  const auto [g, h] = join_in_order(*store, guest, host, 0);
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
  auto store = c10::make_intrusive<c10d::HashStore>();
  Rendezvous a(*store, node("a", 1, false), [] { return 1111; });
  Rendezvous b(*store, node("b", 1, false), [] { return 2222; });
  const auto [ra, rb] = join_in_order(*store, a, b, 0);
  CHECK(ra.group_rank == 0);
  CHECK(rb.group_rank == 1);
  CHECK(ra.master_addr == "a-addr");
  CHECK(rb.master_port == 1111);
}

TEST_CASE("rendezvous: a node keeps its node rank in later rounds, ahead of a store host that joined later") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  // --nnodes 1:2: the guest starts alone as node 0; the node that hosts the
  // store arrives during round 0 and is a newcomer of round 1.
  Config one_or_two = node("guest", 1, false);
  one_or_two.min_nodes = 1;
  Rendezvous guest(*store, one_or_two, [] { return 1111; });
  const Round g0 = guest.join(idle);
  CHECK(g0.group_world_size == 1);
  CHECK(g0.group_rank == 0);

  Config host_cfg = node("host", 1, true);
  host_cfg.min_nodes = 1;
  Rendezvous host(*store, host_cfg, [] { return 2222; });
  auto h1 = std::async(std::launch::async, [&] { return host.join(idle); });
  while (joined(*store, 1) < 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
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
  const auto [h2, g2] = join_in_order(*store, host, guest, 2);
  CHECK(g2.group_rank == 0);
  CHECK(h2.group_rank == 1);
  CHECK(g2.restart_count == 1);
  CHECK(h2.master_port == 1111);
}

// Issue 15, defect 10: a torchrun node and a ddp-launch node in one c10d
// rendezvous (same endpoint and rdzv_id) must fail at the first contact,
// not wait for the join timeout. torchrun keeps its state under
// "torch.rendezvous.<rdzv_id>" (c10d_rendezvous_backend.py).
TEST_CASE("rendezvous: a node whose launcher is silent longer than keep_alive_interval x keep_alive_max_attempt "
          "sends no heartbeat and ends the round as a node lost, named") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Rendezvous guest(*store, node("guest", 1, false), [] { return 1111; });
  Rendezvous host(*store, node("host", 1, true), [] { return 2222; });
  const auto [g, h] = join_in_order(*store, guest, host, 0);
  REQUIRE(g.group_rank == 1);
  // The limit is 0.1 s x 3: a launcher silent for less goes on.
  CHECK_FALSE(guest.tick(0.2));
  const std::string beats_key = "/ddp-rdzv/unit/r0/hb/1";
  const long long beats = store->add(beats_key, 0);
  idle(150);  // a heartbeat is due again (keep_alive_interval 0.1 s)
  const auto stop = guest.tick(0.5);
  REQUIRE(stop);
  CHECK(stop->counted);
  CHECK_THAT(stop->reason, Catch::StartsWith("node n1 (pid ") && Catch::Contains("host guest)") &&
                               Catch::Contains("left during round 0") &&
                               Catch::Contains("its launcher has not answered its rendezvous helper"));
  CHECK(store->add(beats_key, 0) == beats);  // no heartbeat for a launcher that is gone
  // The other node stops for the same reason.
  const auto seen = host.tick();
  REQUIRE(seen);
  CHECK(seen->reason == stop->reason);
}

TEST_CASE("rendezvous: a store that holds torchrun's state for this rdzv_id fails the join at once, naming torchrun") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  // What torchrun writes first: its "no state yet" sentinel.
  store->set("torch.rendezvous.unit", {'Y', '2', 'F', 'u', 'a', 'W', '1', 'h', 'Z', 'G', 'F', 't'});
  Config c = node("a", 1, false);
  c.join_timeout_s = 2;  // without the check, the join waits for the other node this long
  Rendezvous a(*store, c, [] { return 1111; });
  CHECK_THROWS_WITH(a.join(idle), Catch::Contains("the rendezvous store at store:29400 (rdzv_id unit) is used by "
                                                  "torchrun's c10d rendezvous (key 'torch.rendezvous.unit' present)") &&
                                      Catch::Contains("start every node with the same launcher"));
  // torchrun's state is left as it was.
  CHECK(store->get("torch.rendezvous.unit") == std::vector<uint8_t>{'Y', '2', 'F', 'u', 'a', 'W', '1', 'h', 'Z', 'G', 'F', 't'});
}

TEST_CASE("rendezvous: a join claims torchrun's state key with a marker that torchrun cannot decode") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Config c = node("a", 1, false);
  c.min_nodes = c.max_nodes = 1;
  Rendezvous a(*store, c, [] { return 1111; });
  a.join(idle);
  REQUIRE(store->check({"torch.rendezvous.unit"}));
  const auto v = store->get("torch.rendezvous.unit");
  const std::string marker(v.begin(), v.end());
  CHECK_THAT(marker, Catch::StartsWith("ddp-launch"));
  // torchrun base64-decodes its state (b64decode, non-strict: characters
  // outside the alphabet are dropped); a count of 4k+1 data characters can
  // never decode, so torchrun stops with RendezvousStateError at once.
  const auto data = std::count_if(marker.begin(), marker.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '+' || ch == '/' || ch == '=';
  });
  CHECK(data % 4 == 1);
  CHECK(marker.find('=') == std::string::npos);
  // A second ddp-launch node of the same rendezvous is not refused.
  Config c2 = node("b", 1, false);
  c2.min_nodes = c2.max_nodes = 1;
  c2.run_id = "unit";
  auto store2 = c10::make_intrusive<c10d::HashStore>();
  store2->set("torch.rendezvous.unit", v);
  Rendezvous b(*store2, c2, [] { return 2222; });
  CHECK(b.join(idle).group_world_size == 1);
}
