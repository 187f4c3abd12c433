// The attempt's policies in-process (supervise/outcome.h, teardown.h): a
// fake Workers records the signals and says how many workers run, a fake
// clock moves time. Every branch that once needed a real launch to test.
#include "ddp/launcher/supervise/outcome.h"
#include "ddp/launcher/supervise/stack_dumps.h"
#include "ddp/launcher/supervise/teardown.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <vector>

using namespace ddp::launcher;
using namespace std::chrono_literals;

namespace {

struct FakeWorkers : Workers {
  std::vector<int> sent;
  int running = 2;
  bool gone = false;  // no process of any group left
  int signal_all(int sig) override {
    sent.push_back(sig);
    return gone ? 0 : 1;
  }
  int running_workers() const override { return running; }
  bool empty() const override { return gone; }
};

struct FakeClock {
  Teardown::Clock::time_point t{};
  Teardown::Now now() {
    return [this] { return t; };
  }
};

struct Policy {
  FakeWorkers workers;
  FakeClock clock;
  Teardown teardown{workers, 30.0, 5.0, clock.now()};
  Outcome outcome{workers, teardown, clock.now()};
};

}  // namespace

TEST_CASE("policy: the first failure begins the teardown with SIGTERM and the grace period, and later ones change nothing") {
  Policy p;
  CHECK(!p.teardown.deadline());
  CHECK(p.outcome.failure());
  CHECK(p.workers.sent == std::vector<int>{SIGTERM});
  REQUIRE(p.teardown.deadline());
  CHECK(*p.teardown.deadline() == p.clock.t + 30s);
  CHECK(p.teardown.step() == Teardown::Step::Kill);
  p.clock.t += 10s;
  CHECK(!p.outcome.failure());  // a rank that failed because of the teardown
  CHECK(p.workers.sent == std::vector<int>{SIGTERM});
  CHECK(*p.teardown.deadline() == Teardown::Clock::time_point{} + 30s);
  CHECK(p.outcome.failure_seen());
  CHECK(p.outcome.launcher_signal() == 0);
}

TEST_CASE("policy: after the grace period SIGKILL, then kAfterKillWaitS, then giving up") {
  Policy p;
  p.outcome.failure();
  p.clock.t += 30s;
  p.teardown.kill();
  CHECK(p.workers.sent == std::vector<int>{SIGTERM, SIGKILL});
  CHECK(p.teardown.killed());
  CHECK(*p.teardown.deadline() == Teardown::Clock::time_point{} + 35s);
  CHECK(p.teardown.step() == Teardown::Step::GiveUp);
  p.teardown.kill();  // again: signalled again, the wait is not pushed back
  CHECK(*p.teardown.deadline() == Teardown::Clock::time_point{} + 35s);
}

TEST_CASE("policy: a launcher signal while the group runs is the job's signal, forwarded as it is") {
  Policy p;
  p.outcome.signal(SIGHUP);
  CHECK(p.outcome.launcher_signal() == SIGHUP);
  CHECK(p.outcome.signal_during_teardown() == 0);
  CHECK(p.workers.sent == std::vector<int>{SIGHUP});
  CHECK(p.teardown.stopping());
  CHECK(!p.outcome.failure());  // the workers it stops are not failures
  CHECK(!p.outcome.failure_seen());
  p.clock.t += 10s;
  p.outcome.signal(SIGTERM);  // forwarded, but the first one stays the job's
  CHECK(p.outcome.launcher_signal() == SIGHUP);
  CHECK(p.workers.sent == std::vector<int>{SIGHUP, SIGTERM});
  CHECK(*p.teardown.deadline() == Teardown::Clock::time_point{} + 30s);  // the grace period runs from the first
}

TEST_CASE("policy: a signal during a failure's teardown ends the job but is not its cause") {
  Policy p;
  p.outcome.failure();
  p.outcome.signal(SIGTERM);
  CHECK(p.outcome.launcher_signal() == 0);
  CHECK(p.outcome.signal_during_teardown() == SIGTERM);
  CHECK(p.workers.sent == std::vector<int>{SIGTERM, SIGTERM});
  CHECK(!p.teardown.killed());
}

TEST_CASE("policy: a signal once every worker has exited (only leftovers are stopped) is not the job's cause") {
  Policy p;
  p.workers.running = 0;
  p.outcome.signal(SIGINT);
  CHECK(p.outcome.launcher_signal() == 0);
  CHECK(p.outcome.signal_during_teardown() == SIGINT);
}

TEST_CASE("policy: a second SIGINT kills at once, a SIGINT after another signal is a first one") {
  Policy p;
  p.outcome.signal(SIGTERM);
  p.outcome.signal(SIGINT);
  CHECK(!p.teardown.killed());
  p.clock.t += 1s;
  p.outcome.signal(SIGINT);
  CHECK(p.teardown.killed());
  CHECK(p.workers.sent == std::vector<int>{SIGTERM, SIGINT, SIGKILL});
  CHECK(p.outcome.launcher_signal() == SIGTERM);
}

TEST_CASE("policy: leftovers get SIGTERM once, even when a forwarded SIGINT began the teardown") {
  Policy p;
  p.outcome.signal(SIGINT);
  p.workers.running = 0;
  p.teardown.workers_gone();
  p.teardown.workers_gone();
  CHECK(p.workers.sent == std::vector<int>{SIGINT, SIGTERM});
  CHECK(*p.teardown.deadline() == Teardown::Clock::time_point{} + 30s);  // the grace period is not restarted
}

TEST_CASE("policy: leftovers of a group whose workers all succeeded begin a teardown of their own") {
  Policy p;
  p.workers.running = 0;
  p.clock.t += 7s;
  p.teardown.workers_gone();
  CHECK(p.workers.sent == std::vector<int>{SIGTERM});
  CHECK(*p.teardown.deadline() == Teardown::Clock::time_point{} + 37s);
  CHECK(!p.outcome.failure_seen());
}

TEST_CASE("policy: nothing is signalled when no process is left") {
  Policy p;
  p.workers.running = 0;
  p.workers.gone = true;
  p.teardown.workers_gone();
  CHECK(p.workers.sent.empty());
  CHECK(!p.teardown.stopping());
}

TEST_CASE("policy: the rendezvous's stop begins the teardown unless one is under way") {
  Policy p;
  CHECK(p.outcome.stop_requested());
  CHECK(p.workers.sent == std::vector<int>{SIGTERM});
  CHECK(!p.outcome.stop_requested());
  CHECK(!p.outcome.failure());
  CHECK(p.workers.sent == std::vector<int>{SIGTERM});
}

TEST_CASE("policy: the root cause is a spawn failure, else a feature's claim, else the earliest failure") {
  WorkerExit early, late, spawn, stalled;
  early.rank = 1;
  early.code = 3;
  early.time = std::chrono::system_clock::time_point{} + 1s;
  late.rank = 0;
  late.code = 4;
  late.time = early.time + 1s;
  spawn.rank = 2;
  spawn.code = 127;
  spawn.spawn_error = "cannot execute";
  stalled.rank = 3;
  stalled.stalled = "rank 3 stalled";
  const std::vector<WorkerExit> exits{late, early};
  CHECK(Outcome::root_cause(spawn, stalled, true, exits)->rank == 2);
  CHECK(Outcome::root_cause(std::nullopt, stalled, true, exits)->rank == 3);
  CHECK(Outcome::root_cause(std::nullopt, std::nullopt, true, exits)->rank == 1);
  // Stopped by a signal or the rendezvous: failed exits do not make a cause.
  CHECK(!Outcome::root_cause(std::nullopt, std::nullopt, false, exits));
}

TEST_CASE("policy: one Ctrl-C seen twice (the terminal and timeout(1) both deliver it) is one SIGINT, not a kill") {
  // issue 23 item 11: a second SIGINT counts only kSecondSigintAfterS after the first.
  Policy p;
  p.outcome.signal(SIGINT);
  p.clock.t += 2ms;
  p.outcome.signal(SIGINT);
  CHECK(!p.teardown.killed());
  CHECK(p.workers.sent == std::vector<int>{SIGINT, SIGINT});
  p.clock.t += std::chrono::milliseconds(static_cast<int>(kSecondSigintAfterS * 1000)) - 3ms;
  p.outcome.signal(SIGINT);  // still within the interval of the first
  CHECK(!p.teardown.killed());
  p.clock.t += 2ms;
  p.outcome.signal(SIGINT);
  CHECK(p.teardown.killed());
}

TEST_CASE("policy: the report shows the dump that explains the attempt's end, not merely the last one") {
  // issue 23 item 8 (supervise/stack_dumps.h).
  using K = DumpKind;
  CHECK(report_dump_replaces(std::nullopt, K::Live));
  CHECK(!report_dump_replaces(K::Cause, K::Shutdown));  // the stall's dump stays
  CHECK(!report_dump_replaces(K::Cause, K::Cause));     // the first cause stays
  CHECK(!report_dump_replaces(K::Cause, K::Live));
  CHECK(report_dump_replaces(K::Live, K::Cause));
  CHECK(report_dump_replaces(K::Live, K::Shutdown));
  CHECK(report_dump_replaces(K::Live, K::Live));        // the later live dump
  CHECK(report_dump_replaces(K::Shutdown, K::Cause));
  CHECK(!report_dump_replaces(K::Shutdown, K::Live));
}
