// A hot spare's takeover (--hot_spares with --recovery in_place, issue 52
// item 3's last bullet) in process: nodes are threads over one MemoryStore on
// a fake clock, as in test_hot_spares.cpp. The watcher of a lost node other
// than n0 posts a takeover instead of ending the round; one spare claims it
// and runs in the lost node's place in the same round, under the job's next
// recovery generation (counted once); the watcher then watches the spare.
// n0 lost, no in-place recovery, a used-up budget or a spare that cannot
// take the place: the round ends as before, with one clause saying why.
// About 5 s in all (a spare's store waits are real time).
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory_store.h"
#include "rdzv_fake_clock.h"
#include "rdzv_test_nodes.h"
#include "rendezvous.h"

using ddp::rdzv::Config;
using ddp::rdzv::MemoryStore;
using ddp::rdzv::Rendezvous;
using ddp::rdzv::Round;
using ddp::rdzv::SpareNotNeeded;
using ddp::rdzv::Stop;
using ddp::rdzv::testing::FakeClock;
using ddp::rdzv::testing::on_change;
using namespace std::chrono_literals;

namespace {

struct Options {
  bool in_place = true;
  int max_restarts = 1;
  int spares = 1;
  int spare_nproc = 2;
};

// --nnodes 2, two workers a node (a spare: spare_nproc), keep-alive 0.1 s x 3.
Config node(const std::string& name, const Options& o, int nproc = 2) {
  Config c = ddp::rdzv::testing::unit_node("takeover", name, nproc, false);
  c.hot_spares = o.spares;
  c.recovery_in_place = o.in_place;
  c.max_restarts = o.max_restarts;
  c.last_call_timeout_s = 30;
  return c;
}

std::string key(const std::string& k) { return "/ddp-rdzv/takeover/" + k; }

// a (node rank 0) and b (node rank 1) run round 0; spares stand by in round 1.
struct Job {
  explicit Job(Options o = {}) : opts(o) {
    auto ja = std::async(std::launch::async, [&] { return a.join(on_change(store)); });
    REQUIRE(store.wait(key("r0/node/0"), 10s));
    rb = b.join(on_change(store));
    ra = ja.get();
    REQUIRE(ra.group_rank == 0);
    REQUIRE(rb.group_rank == 1);
    for (int i = 0; i < o.spares; ++i) {
      spares.push_back(std::make_unique<Rendezvous>(store, node("s" + std::to_string(i), o, o.spare_nproc),
                                                    [] { return 3333; }, clock.now()));
      Rendezvous* s = spares.back().get();
      standing.push_back(std::async(std::launch::async, [this, s] { return s->join(on_change(store)); }));
      REQUIRE(store.wait(key("r1/node/" + std::to_string(i)), 10s));
    }
  }
  // A spare still waiting ends at once (the futures wait for it).
  ~Job() { store.compare_set(key("abort"), "", "the test is over"); }
  // Only a ticks (b is gone) until a reason to stop, or `ticks` ticks.
  std::optional<Stop> a_alone(int ticks) {
    for (int i = 0; i < ticks; ++i) {
      clock.advance(100ms);
      if (auto s = a.tick()) return s;
    }
    return std::nullopt;
  }
  Options opts;
  MemoryStore store;
  FakeClock clock;
  Rendezvous a{store, node("a", opts), [] { return 1111; }, clock.now()};
  Rendezvous b{store, node("b", opts), [] { return 2222; }, clock.now()};
  Round ra, rb;
  std::vector<std::unique_ptr<Rendezvous>> spares;
  std::vector<std::future<Round>> standing;
};

}  // namespace

TEST_CASE("hot spare takeover: node n1 lost with in-place recovery: the round goes on, the spare takes n1's place "
          "in it under the job's next generation (counted once), and the ring watches the spare") {
  Job j;
  // b is silent: a's watch finds n1 lost within 0.1 s x 3 and posts a
  // takeover instead of ending the round.
  CHECK_FALSE(j.a_alone(6));
  CHECK_THAT(j.store.try_get(key("recovery")).value_or(""), Catch::Equals("1 0 busy 0 2 1 1 b"));
  // a's own ranks re-form under generation 1, as for any peer's recovery.
  const auto peer = j.a.peer_recovery();
  REQUIRE(peer);
  CHECK(peer->generation == 1);
  CHECK(peer->rank == 2);
  CHECK(peer->node == "node n1 (host b)");
  // The spare sees it in its standby read (real time, no clock moves) and
  // runs in round 0 as node n1: ranks 2..3 of 4, under generation 1.
  REQUIRE(j.standing[0].wait_for(5s) == std::future_status::ready);
  const Round s = j.standing[0].get();
  CHECK(s.round == 0);
  CHECK(s.group_rank == 1);
  CHECK(s.group_world_size == 2);
  CHECK(s.base_rank == 2);
  CHECK(s.world_size == 4);
  CHECK(s.restart_count == 0);
  CHECK(s.master_addr == "a-addr");
  CHECK(s.master_port == 1111);
  CHECK(s.recovery_generation == 1);
  CHECK(s.recovery_used == 0);
  CHECK_THAT(s.replaced, Catch::StartsWith("1:s0:") && Catch::Contains(":b:"));
  CHECK_THAT(j.store.try_get(key("r0/takeover")).value_or(""), Catch::StartsWith("claimed 1 0 1 2 4 0 2 "));
  // The spare beats n1's key: a, its watcher, never finds n1 lost again.
  Rendezvous& spare = *j.spares[0];
  for (int i = 0; i < 30; ++i) {
    j.clock.advance(100ms);
    REQUIRE_FALSE(j.a.tick());
    REQUIRE_FALSE(spare.tick());
  }
  CHECK_FALSE(spare.peer_recovery());  // its own
  // Its ranks are back: the record is done, counted once; both finish round 0.
  spare.recovered(1);
  CHECK_THAT(j.store.try_get(key("recovery")).value_or(""), Catch::Equals("1 0 done 0 2 1 1 b"));
  auto done_a = std::async(std::launch::async, [&] { return j.a.done(on_change(j.store)); });
  CHECK(spare.done(on_change(j.store)).empty());
  CHECK(done_a.get().empty());
  CHECK(j.store.try_get(key("r0/end")).value_or("") == "done");
}

TEST_CASE("hot spare takeover: two spares stand by, exactly one takes the lost node's place, the other stands by "
          "until the job ends") {
  Options o;
  o.spares = 2;
  Job j(o);
  CHECK_FALSE(j.a_alone(6));
  int took = -1;
  for (int wait = 0; wait < 50 && took < 0; ++wait)
    for (int i = 0; i < 2; ++i)
      if (j.standing[i].wait_for(100ms) == std::future_status::ready) took = i;
  REQUIRE(took >= 0);
  const Round s = j.standing[took].get();
  CHECK(s.group_rank == 1);
  CHECK(s.recovery_generation == 1);
  CHECK(j.standing[1 - took].wait_for(1500ms) == std::future_status::timeout);
  Rendezvous& spare = *j.spares[took];
  spare.recovered(1);
  auto done_a = std::async(std::launch::async, [&] { return j.a.done(on_change(j.store)); });
  CHECK(spare.done(on_change(j.store)).empty());
  CHECK(done_a.get().empty());
  CHECK_THROWS_AS(j.standing[1 - took].get(), SpareNotNeeded);
}

TEST_CASE("hot spare takeover: node n0 lost (its launcher hosts the workers' store), no --recovery in_place, or "
          "--max_restarts used up: the round ends as before, saying why") {
  SECTION("n0 lost") {
    Job j;
    std::optional<Stop> stop;
    for (int i = 0; i < 6 && !stop; ++i) {
      j.clock.advance(100ms);
      stop = j.b.tick();
    }
    REQUIRE(stop);
    CHECK_THAT(stop->reason, Catch::StartsWith("node n0 (pid ") &&
                                 Catch::EndsWith("; no hot spare takes its place in the running round: node n0's "
                                                 "launcher hosts the workers' store"));
    CHECK_FALSE(j.store.try_get(key("recovery")));
    // As today: the spare takes node rank 0 in round 1.
    const Round b1 = j.b.join(on_change(j.store));
    const Round s1 = j.standing[0].get();
    CHECK(b1.group_rank == 1);
    CHECK(s1.group_rank == 0);
    CHECK(s1.round == 1);
    CHECK(s1.recovery_generation == 0);
  }
  SECTION("no in-place recovery") {
    Options o;
    o.in_place = false;
    Job j(o);
    const auto stop = j.a_alone(6);
    REQUIRE(stop);
    CHECK_THAT(stop->reason, Catch::StartsWith("node n1 (pid ") && Catch::EndsWith("(no heartbeat for 0 s)"));
    CHECK_FALSE(j.store.try_get(key("r0/takeover")));
  }
  SECTION("budget used up") {
    Options o;
    o.max_restarts = 0;
    Job j(o);
    const auto stop = j.a_alone(6);
    REQUIRE(stop);
    CHECK_THAT(stop->reason, Catch::EndsWith("; no hot spare takes its place in the running round: --max_restarts 0 "
                                             "used up (0 restarts and recoveries of the job)"));
    CHECK_FALSE(j.store.try_get(key("r0/takeover")));
  }
}

TEST_CASE("hot spare takeover: no spare can take the place (its node has fewer workers): a keep-alive timeout "
          "after a spare's standby read the round ends, the takeover and its recovery void (not counted)") {
  Options o;
  o.spare_nproc = 1;
  Job j(o);
  CHECK_FALSE(j.a_alone(6));
  REQUIRE(j.store.try_get(key("r0/takeover")));
  // The spare reads it and leaves it (real time), then the clock runs out.
  CHECK(j.standing[0].wait_for(1500ms) == std::future_status::timeout);
  const auto stop = j.a_alone(20);
  REQUIRE(stop);
  CHECK(stop->counted);
  CHECK_THAT(stop->reason, Catch::StartsWith("node n1 (pid ") &&
                               Catch::EndsWith("; no hot spare took its place within a keep-alive timeout: full "
                                               "restart"));
  CHECK_THAT(j.store.try_get(key("r0/takeover")).value_or(""), Catch::StartsWith("void 1 "));
  CHECK_THAT(j.store.try_get(key("recovery")).value_or(""), Catch::Equals("1 0 void 0 2 1 0 b"));
  // Round 1 forms as today, with the spare: the restart counts once.
  const Round a1 = j.a.join(on_change(j.store));
  const Round s1 = j.standing[0].get();
  CHECK(a1.restart_count == 1);
  CHECK(s1.round == 1);
  CHECK(s1.recovery_generation == 0);
}
