// --stall_timeout's decisions without processes: what counts as progress,
// when the job is stalled and who the straggler is (stall_detector.h), with
// made-up heartbeats, CPU times and a fake clock.
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/watch/stall_detector.h"

#include <catch2/catch.hpp>

using namespace ddp::launcher;
using ddp::CollectiveKind;
using ddp::HeartbeatSnapshot;
using Clock = StallDetector::Clock;

namespace {

const Clock::time_point t0 = Clock::time_point() + std::chrono::hours(1);

Clock::time_point at(double s) {
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A heartbeat of a rank that finished `finished` and entered `started`.
HeartbeatSnapshot beat(uint64_t started, uint64_t finished, uint64_t bytes = 1677722) {
  HeartbeatSnapshot s;
  s.pid = 4242;
  s.collective_started = started;
  s.collective_finished = finished;
  s.kind = CollectiveKind::Allreduce;
  s.bytes = bytes;
  s.step = finished;
  return s;
}

RankProgress rank_at(int rank, const HeartbeatSnapshot& s, double last_s) {
  RankProgress r;
  r.rank = rank;
  r.local_rank = rank;
  r.pid = 1000 + rank;
  r.heartbeat = true;
  r.snapshot = s;
  r.last_progress = at(last_s);
  return r;
}

RankProgress plain_at(int rank, double last_s, std::optional<bool> futex) {
  RankProgress r;
  r.rank = rank;
  r.local_rank = rank;
  r.pid = 1000 + rank;
  r.last_progress = at(last_s);
  r.in_futex = futex;
  return r;
}

}  // namespace

TEST_CASE("stall: the rank that did not enter the collective the others wait in is the straggler") {
  // Ranks 0,2,3 started #1042 and wait; rank 1 finished #1041 and did not
  // start #1042 -- even though the waiters' heartbeats stopped first here.
  const std::vector<RankProgress> ranks = {rank_at(0, beat(1042, 1041), 1.0), rank_at(1, beat(1041, 1041), 2.0),
                                           rank_at(2, beat(1042, 1041), 1.5), rank_at(3, beat(1042, 1041), 1.2)};
  const StallVerdict v = decide_stall(ranks, at(7.0), 5.0);
  CHECK(v.straggler.rank == 1);
  CHECK(v.idle_s == Approx(5.0));
  CHECK(v.message ==
        "rank 1 (local_rank 1, pid 1001) stalled: no progress for 5.0 s; rank 1 last finished collective #1041; "
        "ranks 0,2,3 wait in #1042 (allreduce, 1.6 MiB)");
}

TEST_CASE("stall: the furthest behind wins and among equals the heartbeat that stopped first") {
  // Rank 2 is two collectives behind, rank 1 one.
  std::vector<RankProgress> ranks = {rank_at(0, beat(10, 9), 0.0), rank_at(1, beat(9, 9), 0.0),
                                     rank_at(2, beat(8, 8), 3.0)};
  CHECK(decide_stall(ranks, at(9), 5).straggler.rank == 2);
  // Nobody behind (all finished #9, nobody in a collective): the first to stop.
  ranks = {rank_at(0, beat(9, 9), 2.0), rank_at(1, beat(9, 9), 1.0), rank_at(2, beat(9, 9), 3.0)};
  const StallVerdict v = decide_stall(ranks, at(6.5), 5);
  CHECK(v.straggler.rank == 1);
  CHECK(v.message == "rank 1 (local_rank 1, pid 1001) stalled: no progress for 5.5 s; ranks 0-2 last finished "
                     "collective #9");
  // Ties: the lowest rank.
  ranks = {rank_at(3, beat(9, 9), 1.0), rank_at(2, beat(9, 9), 1.0)};
  CHECK(decide_stall(ranks, at(6), 5).straggler.rank == 2);
}

TEST_CASE("stall: rank lists are written as the stack summary writes them (ranks 0-4,6,7)") {
  // Eight ranks waiting in #10 but rank 5, which is behind: the waiters are one range and a pair.
  std::vector<RankProgress> ranks;
  for (int r = 0; r < 8; ++r) ranks.push_back(rank_at(r, r == 5 ? beat(9, 9) : beat(10, 9), 1.0));
  const StallVerdict v = decide_stall(ranks, at(7), 5);
  CHECK(v.straggler.rank == 5);
  CHECK_THAT(v.message, Catch::Contains("ranks 0-4,6,7 wait in #10"));
}

TEST_CASE("stall: every local rank in the same collective says the one they wait for is elsewhere") {
  const std::vector<RankProgress> ranks = {rank_at(4, beat(7, 6, 512), 1.0), rank_at(5, beat(7, 6, 512), 0.5)};
  const StallVerdict v = decide_stall(ranks, at(6), 5);
  CHECK(v.straggler.rank == 5);
  CHECK_THAT(v.message, Catch::Contains("ranks 4,5 wait in #7 (allreduce, 512 B); no rank here is behind: the rank "
                                        "they wait for is on another node, or the collective itself hangs"));
}

TEST_CASE("stall: without heartbeats a rank outside a futex wait is named over the ranks in one") {
  // Rank 0 stopped first but sits in a futex (a collective's wait); rank 1 sleeps.
  std::vector<RankProgress> ranks = {plain_at(0, 1.0, true), plain_at(1, 1.2, false)};
  StallVerdict v = decide_stall(ranks, at(4.5), 3);
  CHECK(v.straggler.rank == 1);
  CHECK(v.message == "rank 1 (local_rank 1, pid 1001) stalled: no progress for 3.3 s; no rank used CPU time or wrote "
                     "output that the launcher sees; rank 0 waits in a futex (where a collective waits), rank 1 does not");
  // Nothing tells them apart: the first to stop, said honestly.
  ranks = {plain_at(0, 1.0, false), plain_at(1, 0.5, false)};
  v = decide_stall(ranks, at(4), 3);
  CHECK(v.straggler.rank == 1);
  CHECK_THAT(v.message, Catch::EndsWith("; rank 1 stopped first"));
  ranks = {plain_at(0, 1.0, std::nullopt), plain_at(1, 1.0, std::nullopt)};
  v = decide_stall(ranks, at(4), 3);
  CHECK(v.straggler.rank == 0);
  CHECK_THAT(v.message, Catch::EndsWith("; the ranks stopped together: named the lowest"));
}

TEST_CASE("stall detector: a heartbeat rank is stalled alone and its start and every page change count as progress") {
  StallDetector d(5.0);
  CHECK(d.interval() == std::chrono::seconds(1));
  d.add(0, 0, 100, at(0));
  d.add(1, 1, 101, at(0));
  // Past their first collective, both are judged by their pages.
  d.observe(0, beat(1, 1), 0, at(0.5));
  d.observe(1, beat(1, 1), 0, at(0.5));
  CHECK(d.ranks()[0].heartbeat);
  // Rank 0 advances until 4.0, rank 1 never again: its 5 s run out at 5.5.
  for (double t = 1; t <= 4; t += 1) {
    d.observe(0, beat(static_cast<uint64_t>(t) + 1, static_cast<uint64_t>(t) + 1), 0, at(t));
    d.observe(1, beat(1, 1), 0, at(t));
  }
  CHECK_FALSE(d.stalled(at(5.4)));
  CHECK(d.deadline() == at(5.5));
  CHECK(d.stalled(at(5.5)));
  // CPU time means nothing for a heartbeat rank (it may spin in a wait).
  StallDetector spin(5.0);
  spin.add(0, 0, 100, at(0));
  spin.observe(0, beat(3, 3), 0, at(0));
  spin.observe(0, beat(3, 3), 9.0, at(4));
  CHECK(spin.stalled(at(5)));
}

TEST_CASE("stall detector: without heartbeats the ranks stall together by CPU time above noise and output") {
  StallDetector d(2.0);
  CHECK(d.interval() == std::chrono::milliseconds(500));
  d.add(0, 0, 100, at(0));
  d.add(1, 1, 101, at(0));
  // Rank 1 burns CPU until 3.0 (rank 0 idles): not stalled while rank 1 works.
  for (double t = 0.5; t <= 3.0; t += 0.5) {
    d.observe(0, std::nullopt, 0.1, at(t));
    d.observe(1, std::nullopt, t, at(t));
  }
  CHECK_FALSE(d.stalled(at(3.0)));
  // Then a timer tick now and then (10 ms in 2 s, under 2%): no progress.
  d.observe(1, std::nullopt, 3.01, at(4.5));
  CHECK_FALSE(d.stalled(at(4.9)));
  CHECK(d.stalled(at(5.0)));
  // A line of output from rank 0 at 4.8 holds the group until 6.8.
  d.note_output(0, at(4.8));
  CHECK_FALSE(d.stalled(at(6.7)));
  CHECK(d.stalled(at(6.8)));
  // An attached runtime worker that has not begun a collective or a step
  // yet (loading data) is judged by CPU time too.
  StallDetector s(2.0);
  s.add(0, 0, 100, at(0));
  HeartbeatSnapshot attached;
  attached.pid = 100;
  s.observe(0, attached, 1.0, at(1));
  CHECK_FALSE(s.ranks()[0].heartbeat);
  s.observe(0, attached, 2.5, at(2.5));
  CHECK_FALSE(s.stalled(at(4.4)));
  CHECK(s.stalled(at(4.5)));
}

TEST_CASE("stall detector: an exited rank stalls nothing and no rank means no stall") {
  StallDetector d(1.0);
  d.add(0, 0, 100, at(0));
  d.observe(0, beat(1, 1), 0, at(0));
  d.remove(0);
  CHECK_FALSE(d.stalled(at(100)));
  CHECK(d.deadline() == Clock::time_point::max());
}

TEST_CASE("stall report: the straggler is the root cause with exit code 124 and the verdict as its message") {
  WorkerExit w;
  w.rank = 1;
  w.local_rank = 1;
  w.pid = 4242;
  w.signaled = true;
  w.code = 15;  // the launcher's SIGTERM
  w.after_teardown = true;
  w.stalled = "rank 1 (local_rank 1, pid 4242) stalled: no progress for 5.0 s; rank 1 last finished collective #9";
  AttemptResult a;
  a.root_cause = w;
  a.exits = {w};
  CHECK(a.exit_code() == 124);
  CHECK(a.restartable());
  CHECK(format_restart_line(a, 1) == "ddp-launch: attempt 0 failed: rank 1 stalled; ended by the launcher: signal 15 "
                                     "(SIGTERM); restarting the group (restart 1 of 1)");
  const std::string report = format_failure_report({a}, "h", 0);
  CHECK_THAT(report, Catch::Contains("  exitcode   : 124 (stalled; ended by the launcher: signal 15 (SIGTERM))\n") &&
                         Catch::Contains("  message    : " + w.stalled + "\n"));
}

TEST_CASE("stall: a rank stopped by a signal (state T) is the straggler, even when it entered the collective too") {
  // issue 23 item 6: rank 1 was SIGSTOPped inside the collective both ranks
  // entered; the tie went to rank 0, and the message sent the user to
  // "another node" on a one-node job.
  std::vector<RankProgress> ranks = {rank_at(0, beat(7, 6), 0.5), rank_at(1, beat(7, 6), 1.0)};
  ranks[1].state = 'T';
  const StallVerdict v = decide_stall(ranks, at(6), 5, true);
  CHECK(v.straggler.rank == 1);
  CHECK_THAT(v.message, Catch::Contains("rank 1 (local_rank 1, pid 1001) is stopped (state T: SIGSTOP, SIGTSTP or a "
                                        "debugger; kill -CONT 1001 continues it)"));
  CHECK_THAT(v.message, !Catch::Contains("another node"));
}

TEST_CASE("stall: without heartbeats too, a stopped rank wins over a rank that merely stopped first") {
  std::vector<RankProgress> ranks = {plain_at(0, 0.5, true), plain_at(1, 1.0, true), plain_at(2, 1.5, false)};
  ranks[1].state = 't';
  const StallVerdict v = decide_stall(ranks, at(7), 5);
  CHECK(v.straggler.rank == 1);
  CHECK_THAT(v.message, Catch::Contains("is stopped (state t: "));
  // Uninterruptible (D) counts too, after a stopped one.
  ranks[1].state = 0;
  ranks[0].state = 'D';
  const StallVerdict d = decide_stall(ranks, at(7), 5);
  CHECK(d.straggler.rank == 0);
  CHECK_THAT(d.message, Catch::Contains("rank 0 (local_rank 0, pid 1000) is in uninterruptible sleep (state D"));
}

TEST_CASE("stall: on a job whose every rank is on this node, no rank is sent to look at another node") {
  const std::vector<RankProgress> ranks = {rank_at(0, beat(7, 6, 512), 1.0), rank_at(1, beat(7, 6, 512), 0.5)};
  const StallVerdict v = decide_stall(ranks, at(6), 5, true);
  CHECK_THAT(v.message, Catch::EndsWith("ranks 0,1 wait in #7 (allreduce, 512 B); no rank is behind: the collective "
                                        "itself hangs"));
}

// Issue 51 item 12: the shutdown dump said "ranks 0,1 wait in #31 (barrier,
// 0 B)" while rank 1 was in a broadcast: the ranks were out of step.
TEST_CASE("stall: ranks in one collective number but different calls are shown apart, and called out of step") {
  HeartbeatSnapshot barrier = beat(31, 30, 0);
  barrier.kind = CollectiveKind::Barrier;
  HeartbeatSnapshot broadcast = beat(31, 30, 4);
  broadcast.kind = CollectiveKind::Broadcast;
  const std::string where = collective_summary({rank_at(0, barrier, 1.0), rank_at(1, broadcast, 1.0)});
  CHECK(where == "rank 1 waits in #31 (broadcast, 4 B); rank 0 waits in #31 (barrier, 0 B); the ranks are out of "
                 "step: one collective number names different calls on different ranks (a rank called a collective "
                 "the others did not)");
  // One call whose sizes differ between ranks (an uneven gather) is not.
  CHECK(collective_summary({rank_at(0, beat(7, 6, 512), 1.0), rank_at(1, beat(7, 6, 1024), 1.0)}) ==
        "ranks 0,1 wait in #7 (allreduce, 512 B)");
}
