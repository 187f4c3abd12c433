// The rendezvous format (launcher/rdzv/rendezvous.h, issue 52: hot spares
// changed the values' words without a version) in process: nodes are
// threads over one MemoryStore; an older or newer node is played by the
// test, writing the values that version writes. Every mismatch ends with
// one line that names both versions, never a wrong parse or a hang. About
// 1.5 s in all (a waiting node reads the abort key after a 1 s slice).
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <string>
#include <unistd.h>

#include "memory_store.h"
#include "rdzv_fake_clock.h"
#include "rdzv_test_nodes.h"
#include "rendezvous.h"

using namespace ddp::rdzv;
using namespace ddp::rdzv::testing;
using namespace std::chrono_literals;

namespace {

Config node(const std::string& name, int nodes) {
  Config c = unit_node("fmt", name, 1, false);
  c.min_nodes = c.max_nodes = nodes;
  c.last_call_timeout_s = 60;
  c.launcher_version = "9.9.9";
  return c;
}

std::string k(const std::string& key) { return "/ddp-rdzv/fmt/" + key; }

// Node a (this version) joins first and waits for the round of `nodes`.
struct FirstNode {
  FirstNode(MemoryStore& store, FakeClock& clock, int nodes)
      : rz(store, node("a", nodes), [] { return 1111; }, clock.now()),
        joined(std::async(std::launch::async, [this, &store] { return rz.join(on_change(store)); })) {
    REQUIRE(store.wait(k("r0/node/0"), 10s));
  }
  Rendezvous rz;
  std::future<Round> joined;
};

const std::string kMismatch =
    "rendezvous at store:29400 (rdzv_id fmt): every node must run the same ddp-launch version; this node runs "
    "ddp-launch 9.9.9 (rendezvous format 3), ";

}  // namespace

TEST_CASE("rendezvous format: a round with a node of another format is not formed, every node ends saying why") {
  MemoryStore store;
  FakeClock clock;
  // a (this version) opens the round of three and waits; another version's
  // node joins second, as that version does; c (this version) closes it.
  FirstNode a(store, clock, 3);
  // The round key stays a bare number: an older node advances it by
  // compare-and-set on the number.
  CHECK(store.try_get(k("round")) == "0");
  CHECK(store.try_get(k("r0/node/0")) == "a " + std::to_string(::getppid()) + " a-addr 1 -1 0 -1 ddp-rdzv/3 9.9.9");
  std::string descriptor, runs;
  SECTION("a node of format 1 (before hot spares: six words)") {
    descriptor = "old 42 old-addr 1 -1 0";
    runs = "the node on host old (pid 42) runs an older ddp-launch (its rendezvous values carry no format)";
  }
  SECTION("a node of format 2 (hot spares, no format: seven words)") {
    descriptor = "old 42 old-addr 1 -1 0 -1";
    runs = "the node on host old (pid 42) runs an older ddp-launch (its rendezvous values carry no format)";
  }
  SECTION("a node of a future format") {
    descriptor = "new 43 new-addr 1 -1 0 -1 ddp-rdzv/4 10.0.0";
    runs = "the node on host new (pid 43) runs ddp-launch 10.0.0 (rendezvous format 4)";
  }
  REQUIRE(store.add(k("r0/joined"), 1) == 2);
  store.set(k("r0/node/1"), descriptor);
  Rendezvous c(store, node("c", 3), [] { return 1111; }, clock.now());
  const std::string why = kMismatch + runs + ": start every node with one ddp-launch version";
  CHECK_THROWS_WITH(c.join(on_change(store)), why);
  CHECK(store.try_get(k("abort")) == why);  // the round's waiting nodes read it
  CHECK_THROWS_WITH(a.joined.get(), "the job was ended: " + why);
}

TEST_CASE("rendezvous format: a round closed by an older ddp-launch (it never reads the format) ends every node") {
  MemoryStore store;
  FakeClock clock;
  FirstNode a(store, clock, 2);
  // The older node: joins second, so it closes the round, and writes the
  // rank values of its format (five words, no format).
  REQUIRE(store.add(k("r0/joined"), 1) == 2);
  store.set(k("r0/node/1"), "old 42 old-addr 1 -1 0 -1");
  CHECK(store.compare_set(k("r0/closed"), "", "2 2 2") == "2 2 2");
  store.multi_set({{k("r0/member/0"), "old 42 old-addr 1 -1 0 -1"},
                   {k("r0/rank/1"), "0 0 2 0 2"},
                   {k("r0/member/1"), *store.try_get(k("r0/node/0"))},
                   {k("r0/rank/0"), "1 1 2 0 2"}});
  const std::string why = kMismatch +
                          "the node that closed round 0 runs an older ddp-launch (its rendezvous values carry no "
                          "format): start every node with one ddp-launch version";
  CHECK_THROWS_WITH(a.joined.get(), why);
  CHECK(store.try_get(k("abort")) == why);
}
