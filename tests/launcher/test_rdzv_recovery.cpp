// In-place recovery across the nodes of a c10d round, the rendezvous' part
// (launcher/rdzv/rendezvous_recovery.cpp), in process: two nodes over one
// MemoryStore, each on its own counting store. The node that loses a rank
// gets the job's generation in two requests; the other node learns of it in
// its next tick at no extra request; a second recovery while one is busy is
// refused; the job's budget counts restarts and recoveries together (a grant
// given up before it began counts not), and the next round's restart count
// includes the recoveries. Milliseconds.
#include <catch2/catch.hpp>

#include <future>
#include <thread>

#include "memory_store.h"
#include "rdzv_counting_store.h"
#include "rdzv_test_nodes.h"
#include "rendezvous.h"

using namespace ddp::rdzv;
using namespace std::chrono_literals;

using Counting = testing::CountingStore;

TEST_CASE("rendezvous: in-place recovery across nodes takes the job's generation in two requests, the other node "
          "hears it in its tick, and restarts and recoveries share one budget") {
  MemoryStore shared(10s);
  Counting sa(shared), sb(shared);
  Rendezvous a(sa, testing::unit_node("rec", "a", 1, true), [] { return 2222; });
  Rendezvous b(sb, testing::unit_node("rec", "b", 1, false), [] { return 2222; });
  const auto idle = [](int) {
    std::this_thread::sleep_for(1ms);
    return true;
  };
  auto ja = std::async(std::launch::async, [&] { return a.join(idle); });
  const Round rb = b.join(idle);
  const Round ra = ja.get();
  REQUIRE(ra.restart_count == 0);
  Rendezvous& lost_at = ra.group_rank == 1 ? a : b;  // node n1 loses its rank
  Rendezvous& other = ra.group_rank == 1 ? b : a;
  Counting& lost_store = ra.group_rank == 1 ? sa : sb;
  Counting& other_store = ra.group_rank == 1 ? sb : sa;
  lost_store.take();
  other_store.take();

  // Node n1 loses global rank 1: generation 1, nothing used before it.
  const auto t = lost_at.recover(/*budget=*/2, /*rank=*/1);
  CHECK(t.granted);
  CHECK(t.generation == 1);
  CHECK(t.used == 0);
  CHECK(lost_store.take() == 2);  // a read and a compareSet
  // The other node: its tick's one multi_get says so, once.
  CHECK_FALSE(other.tick());
  const auto p = other.peer_recovery();
  REQUIRE(p);
  CHECK(p->generation == 1);
  CHECK(p->rank == 1);
  CHECK(p->used == 0);
  CHECK(p->node.find("node n1 (host ") == 0);
  CHECK(other_store.take() <= 3);  // the tick's own requests (heartbeat, peer's heartbeat, stop keys)
  CHECK_FALSE(other.tick());
  CHECK_FALSE(other.peer_recovery());
  CHECK_FALSE(lost_at.tick());
  CHECK_FALSE(lost_at.peer_recovery());  // its own is no peer's

  // A failure on the other node while it is busy: refused, named.
  const auto busy = other.recover(2, 0);
  CHECK_FALSE(busy.granted);
  CHECK_FALSE(busy.used_up);
  CHECK(busy.refusal == "the in-place recovery of rank 1 on node n1 (host " + std::string(&lost_at == &a ? "a" : "b") +
                            ") (generation 1) is under way");
  // Back: the next one may go, and it is the budget's second.
  lost_at.recovered(1);
  const auto second = other.recover(2, 0);
  CHECK(second.granted);
  CHECK(second.generation == 2);
  CHECK(second.used == 1);
  other.recovered(2);
  // A grant given up before it began (a second failure on its node came
  // first): void, it counts not, and its generation is never used again.
  const auto given_up = lost_at.recover(3, 1);
  CHECK(given_up.granted);
  CHECK(given_up.generation == 3);
  CHECK(given_up.used == 2);
  lost_at.cancel_recovery();
  // The budget (2) is used up by the two recoveries.
  const auto third = lost_at.recover(2, 1);
  CHECK_FALSE(third.granted);
  CHECK(third.used_up);
  CHECK(third.used == 2);
  CHECK(third.refusal == "--max_restarts 2 used up (2 restarts and recoveries of the job)");

  // A failure ends the round: round 1's restart count is that restart and
  // the two recoveries.
  lost_at.fail("rank 1 exited with 1");
  CHECK(other.tick());
  auto j2 = std::async(std::launch::async, [&] { return a.join(idle); });
  const Round rb2 = b.join(idle);
  const Round ra2 = j2.get();
  CHECK(ra2.round == 1);
  CHECK(ra2.restart_count == 3);
  CHECK(rb2.restart_count == 3);
  (void)rb;
  // In round 1 the budget counts from there: 3 used, a budget of 4 leaves
  // one; generation 3 (void) is not used again.
  const auto next = a.recover(4, 0);
  CHECK(next.granted);
  CHECK(next.generation == 4);
  CHECK(next.used == 3);
}
