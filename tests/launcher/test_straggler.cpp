// Straggler scores, the step sampler and the trace, without processes:
// made-up steps for the scores (a fake clock: the steps' own times), pages
// written in this process for the sampler, and the trace's JSON parsed back
// (Boost.PropertyTree) for its tracks, slices and bound. The end-to-end
// cases (a real job with a slow rank) are tests/worker/test_straggler_runtime.cpp.
#include "ddp/common/heartbeat.h"
#include "ddp/common/ptree_json.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/elastic/rdzv_agent.h"
#include "ddp/launcher/report/summary.h"
#include "ddp/launcher/report/trace_file.h"
#include "ddp/launcher/watch/step_sampler.h"
#include "ddp/launcher/watch/straggler_scores.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

#include "usage_message.h"

using namespace ddp::launcher;
using ddp::test::usage_message;

namespace {

constexpr uint64_t kMs = 1000000;

// `n` synchronous steps of `ranks` ranks from t0: each rank works work_ms[r]
// and then waits for the slowest, as DDP's allreduce makes it.
std::vector<StepRecord> lockstep(const std::vector<double>& work_ms, int n, uint64_t t0 = 1000 * kMs) {
  double slowest = 0;
  for (double w : work_ms) slowest = std::max(slowest, w);
  std::vector<StepRecord> out;
  for (int i = 0; i < n; ++i)
    for (size_t r = 0; r < work_ms.size(); ++r) {
      StepRecord s;
      s.rank = static_cast<int>(r);
      s.local_rank = static_cast<int>(r);
      s.step = static_cast<uint64_t>(i + 1);
      s.start_ns = t0 + static_cast<uint64_t>(i * slowest * kMs);
      s.end_ns = s.start_ns + static_cast<uint64_t>(slowest * kMs);
      s.wait_ns = static_cast<uint64_t>((slowest - work_ms[r]) * kMs);
      out.push_back(s);
    }
  return out;
}

StragglerOptions window(double s) {
  StragglerOptions o;
  o.window_s = s;
  return o;
}

}  // namespace

TEST_CASE("straggler scores: the rank the others wait for is named with its score and their wait share") {
  StragglerScores scores(window(2));
  for (const StepRecord& s : lockstep({30, 30, 30, 60}, 40)) scores.add(s);  // 2.4 s of steps
  CHECK_FALSE(scores.evaluate(1000 * kMs + 1900 * kMs));                   // the window is not over
  const auto v = scores.evaluate(1000 * kMs + 2500 * kMs);
  REQUIRE(v);
  CHECK(v->rank == 3);
  CHECK(v->ranks == 4);
  CHECK(v->work_ms == Approx(60));
  CHECK(v->fastest_ms == Approx(30));
  CHECK(v->score == Approx(0.5));
  CHECK(v->others_wait_share == Approx(0.5));
  CHECK(format_straggler_line(*v, "b") ==
        "ddp-launch: rank 3 (host b, local_rank 3) is a straggler: 60 ms of its own work a step against 30 ms on "
        "the fastest of 4 ranks (score 0.50); the other ranks wait 50% of each step for it");
  // The next window names it again only after repeat_s (300 s); its verdict is still kept.
  for (const StepRecord& s : lockstep({30, 30, 30, 60}, 40, 3600 * kMs)) scores.add(s);
  CHECK_FALSE(scores.evaluate(3600 * kMs + 2500 * kMs));
  REQUIRE(scores.last_window());
  CHECK(scores.last_window()->rank == 3);

  const auto totals = scores.totals();
  REQUIRE(totals.size() == 4);
  CHECK(totals[3].steps == 80);
  CHECK(totals[3].work_ms_median == Approx(60));
  CHECK(totals[3].wait_share == Approx(0).margin(1e-9));
  CHECK(totals[3].relative_score == Approx(0.5));
  CHECK(totals[0].relative_score == Approx(1));
  CHECK(totals[0].wait_share == Approx(0.5));
  CHECK(totals[0].step_ms_median == Approx(60));
  CHECK(totals[0].step_ms_p90 == Approx(60));
  CHECK(totals[0].individual_score == Approx(1));
}

TEST_CASE("straggler scores: a balanced job, too few steps or a threshold of 0 name no one") {
  {
    StragglerScores scores(window(2));
    for (const StepRecord& s : lockstep({30, 31, 29, 30}, 80)) scores.add(s);
    CHECK_FALSE(scores.evaluate(1000 * kMs + 2500 * kMs));
    REQUIRE(scores.last_window());  // the scores were computed, above the threshold
    CHECK(scores.last_window()->score > 0.9);
  }
  {
    StragglerScores scores(window(2));
    for (const StepRecord& s : lockstep({30, 60}, 4)) scores.add(s);  // 4 steps: fewer than min_steps
    CHECK_FALSE(scores.evaluate(1000 * kMs + 2500 * kMs));
    CHECK_FALSE(scores.last_window());
  }
  {
    StragglerOptions o = window(2);
    o.threshold = 0;
    StragglerScores scores(o);
    for (const StepRecord& s : lockstep({30, 60}, 80)) scores.add(s);
    CHECK_FALSE(scores.evaluate(1000 * kMs + 2500 * kMs));
    REQUIRE(scores.last_window());
    CHECK(scores.last_window()->score == Approx(0.5));
  }
  {  // one rank alone has nothing to be compared with
    StragglerScores scores(window(2));
    for (const StepRecord& s : lockstep({60}, 80)) scores.add(s);
    CHECK_FALSE(scores.evaluate(1000 * kMs + 9000 * kMs));
  }
}

TEST_CASE("straggler scores: the individual score compares a rank's window with its own best") {
  StragglerOptions o = window(2);
  o.threshold = 0.8;
  StragglerScores scores(o);
  for (const StepRecord& s : lockstep({30, 30}, 80)) scores.add(s);
  CHECK_FALSE(scores.evaluate(1000 * kMs + 2500 * kMs));
  // Both slow down alike (a shared node got busy): no straggler, but each is at half its best.
  for (const StepRecord& s : lockstep({60, 60}, 40, 10000 * kMs)) scores.add(s);
  CHECK_FALSE(scores.evaluate(10000 * kMs + 2500 * kMs));
  REQUIRE(scores.last_window());
  CHECK(scores.last_window()->individual_score == Approx(0.5));
  for (const RankStepStats& st : scores.totals()) CHECK(st.individual_score == Approx(0.5));
}

TEST_CASE("quantiles: median and nearest-rank p90") {
  CHECK(median_of({}) == 0);
  CHECK(median_of({3, 1, 2}) == 2);
  CHECK(median_of({4, 1, 3, 2}) == 2.5);
  CHECK(quantile_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9) == 9);
  CHECK(quantile_of({5}, 0.9) == 5);
}

TEST_CASE("step sampler: steps from consecutive marks with the wait between them, and finished collectives") {
  // Sealed pages as the launcher makes them, attached by fd as a worker does.
  std::shared_ptr<const ddp::Heartbeat> page0 = ddp::Heartbeat::create_sealed();
  std::shared_ptr<const ddp::Heartbeat> page1 = ddp::Heartbeat::create_sealed();
  auto w0 = ddp::Heartbeat::attach(ddp::Heartbeat::fd_path(::dup(page0->fd())));
  auto w1 = ddp::Heartbeat::attach(ddp::Heartbeat::fd_path(::dup(page1->fd())));
  StepSampler sampler;
  sampler.watch(0, 4, page0);
  sampler.watch(1, 5, page1);
  w0->set_step(1);
  w0->collective_started(1, ddp::CollectiveKind::Allreduce, 64);
  w0->add_wait_ns(3 * kMs);
  w0->collective_finished(1);
  w0->set_step(2);
  w1->set_step(1);
  Sample s;
  sampler.read(s);
  REQUIRE(s.steps.size() == 1);  // step 2 of rank 4 and step 1 of rank 5 are not over
  CHECK(s.steps[0].rank == 4);
  CHECK(s.steps[0].local_rank == 0);
  CHECK(s.steps[0].step == 1);
  CHECK(s.steps[0].wait_ns == 3 * kMs);
  CHECK(s.steps[0].end_ns >= s.steps[0].start_ns);
  REQUIRE(s.collectives.size() == 1);
  CHECK(s.collectives[0].rank == 4);
  CHECK(s.collectives[0].mark.bytes == 64);
  Sample again;
  w1->set_step(2);
  sampler.read(1, again);  // one rank's last marks (it exited)
  REQUIRE(again.steps.size() == 1);
  CHECK(again.steps[0].rank == 5);
  CHECK(sampler.lost_steps() == 0);
}

namespace {

boost::property_tree::ptree parse(const std::string& json) {
  std::istringstream in(json);
  boost::property_tree::ptree t;
  boost::property_tree::read_json(in, t);
  return t;
}

}  // namespace

TEST_CASE("trace: a process per rank with a steps and a collectives thread, collectives never overlapping") {
  RunTrace trace("/unused", "h1", 1000 * kMs);
  trace.rank(0, 0);
  trace.rank(1, 1);
  for (const StepRecord& s : lockstep({30, 60}, 3)) trace.step(s);
  // Two buckets in flight at once on rank 0: the second runs after the first.
  trace.collective({0, 0, {1, ddp::CollectiveKind::Allreduce, 400, 1010 * kMs, 1030 * kMs}});
  trace.collective({0, 0, {2, ddp::CollectiveKind::Allreduce, 200, 1015 * kMs, 1040 * kMs}});
  trace.collective({1, 1, {1, ddp::CollectiveKind::Broadcast, 12, 1050 * kMs, 1051 * kMs}});
  trace.instant("attempt 0 started", 1000 * kMs);
  trace.instant("exited: exit code 0", 1200 * kMs, 1);
  const auto t = parse(trace.json());
  std::map<std::string, int> names;  // process and thread names
  std::set<int> named_processes;
  std::set<std::pair<int, int>> named_threads, instant_threads;
  int steps = 0, collectives = 0, instants = 0;
  std::vector<std::pair<double, double>> rank0_collectives;
  for (const auto& [_, e] : t.get_child("traceEvents")) {
    const std::string ph = e.get<std::string>("ph");
    if (ph == "M" && e.get<std::string>("name") != "process_sort_index") ++names[e.get<std::string>("args.name")];
    if (ph == "M" && e.get<std::string>("name") == "process_name") named_processes.insert(e.get<int>("pid"));
    if (ph == "M" && e.get<std::string>("name") == "thread_name")
      named_threads.insert({e.get<int>("pid"), e.get<int>("tid")});
    // Thread-scoped: Perfetto puts global ("g") instants on a track of no
    // process, which it titles "Unnamed SliceTrack".
    if (ph == "i") CHECK(e.get<std::string>("s") == "t");
    if (ph == "i") instant_threads.insert({e.get<int>("pid"), e.get<int>("tid")});
    if (ph == "X" && e.get<std::string>("cat") == "step") ++steps;
    if (ph == "X" && e.get<std::string>("cat") == "collective") {
      ++collectives;
      if (e.get<int>("pid") == 1)
        rank0_collectives.push_back({e.get<double>("ts"), e.get<double>("ts") + e.get<double>("dur")});
    }
    if (ph == "i") ++instants;
  }
  CHECK(names["rank 0 (local_rank 0, host h1)"] == 1);
  CHECK(names["rank 1 (local_rank 1, host h1)"] == 1);
  CHECK(names["ddp-launch (h1)"] == 1);
  CHECK(names["events"] == 1);  // the launcher's own thread
  // Every track with events has its process's and its thread's name: none
  // reads "Unnamed" in Perfetto.
  CHECK(instant_threads.size() == 2);
  for (const auto& [pid, tid] : instant_threads) {
    CAPTURE(pid, tid);
    CHECK(named_processes.count(pid) == 1);
    CHECK(named_threads.count({pid, tid}) == 1);
  }
  CHECK(names["steps"] == 2);
  CHECK(names["collectives"] == 2);
  CHECK(steps == 6);
  CHECK(collectives == 3);
  CHECK(instants == 2);
  REQUIRE(rank0_collectives.size() == 2);
  CHECK(rank0_collectives[0].first == Approx(10000));  // µs from the launcher's start
  CHECK(rank0_collectives[0].second == Approx(30000));
  CHECK(rank0_collectives[1].first == Approx(30000));  // queued behind #1 until it ended
  CHECK(rank0_collectives[1].second == Approx(40000));
  CHECK(t.get<int>("otherData.dropped_slices") == 0);
}

TEST_CASE("trace: bounded to its last slices, the dropped ones counted") {
  RunTrace trace("/unused", "h", 0, 10);
  for (const StepRecord& s : lockstep({1, 2}, 20)) trace.step(s);
  CHECK(trace.slices() == 10);
  CHECK(trace.dropped() == 30);
  const auto t = parse(trace.json());
  CHECK(t.get<int>("otherData.dropped_slices") == 30);
  int last_step = 0;
  for (const auto& [_, e] : t.get_child("traceEvents"))
    if (e.get<std::string>("ph") == "X") last_step = std::max(last_step, e.get<int>("args.step"));
  CHECK(last_step == 20);  // the end of the run is kept
}

TEST_CASE("trace: the line naming the file counts the dropped slices and each rank's marks lost before a read") {
  RunTrace trace("/tmp/t.json", "h", 0, 10);
  for (const StepRecord& s : lockstep({1, 2}, 20)) trace.step(s);
  CHECK(format_trace_written(trace) ==
        "ddp-launch: trace of 2 ranks (10 slices, the 30 oldest dropped) written to /tmp/t.json "
        "(open it in ui.perfetto.dev)\n");
  trace.lost({0, 0, 124});
  trace.lost({1, 2, 0});
  trace.lost({0, 0, 6});
  CHECK(format_trace_written(trace) ==
        "ddp-launch: trace of 2 ranks (10 slices, the 30 oldest dropped); not in it, written faster than read (a page "
        "keeps the last 76 collectives and 48 steps, read every 100 ms): rank 0 130 collectives, rank 1 2 steps; "
        "written to /tmp/t.json (open it in ui.perfetto.dev)\n");
  const auto t = parse(trace.json());
  std::map<int, std::pair<int, int>> lost;
  for (const auto& [_, l] : t.get_child("otherData.lost_marks"))
    lost[l.get<int>("rank")] = {l.get<int>("steps"), l.get<int>("collectives")};
  CHECK(lost == std::map<int, std::pair<int, int>>{{0, {0, 130}}, {1, {2, 0}}});
}

TEST_CASE("trace: ranks that marked nothing without --python_heartbeat: the line says what to add") {
  RunTrace trace("/tmp/t.json", "h", 0);
  trace.rank(0, 0);
  trace.rank(1, 1);
  CHECK(format_trace_written(trace, false) ==
        "ddp-launch: trace of 2 ranks (0 slices); no rank marked a step or a collective: a Python script needs "
        "--python_heartbeat (or ddp_launch.heartbeat.enable() in it), a C++ program the ddp worker runtime; "
        "written to /tmp/t.json (open it in ui.perfetto.dev)\n");
  CHECK(format_trace_written(trace, true) ==
        "ddp-launch: trace of 2 ranks (0 slices) written to /tmp/t.json (open it in ui.perfetto.dev)\n");
}

TEST_CASE("straggler and trace options: defaults, both spellings, PET_ variables and one-line errors") {
  const LaunchOptions d = parse_launch_options({"x"}, {});
  CHECK(d.straggler_threshold == 0.8);
  CHECK(d.straggler_window_s == 30);
  CHECK(d.trace_file.empty());
  CHECK(parse_launch_options({"--straggler-threshold=0", "x"}, {}).straggler_threshold == 0);
  CHECK(parse_launch_options({"x"}, {{"PET_STRAGGLER_WINDOW", "5"}}).straggler_window_s == 5);
  CHECK(parse_launch_options({"--trace_file", "/t/x.json", "x"}, {}).trace_file == "/t/x.json");
  CHECK(parse_launch_options({"x"}, {{"PET_TRACE_FILE", "t.json"}}).trace_file == "t.json");
  const std::string hint = ": not a score between 0 and 1; give how slow a rank may be against the fastest before it "
                           "is named (0.8: its own work a step takes 1.25 times the fastest rank's), or 0 to never "
                           "name one";
  CHECK(usage_message({"--straggler_threshold", "1.5", "x"}) == "--straggler_threshold 1.5" + hint);
  CHECK(usage_message({"x"}, {{"PET_STRAGGLER_THRESHOLD", "high"}}) == "PET_STRAGGLER_THRESHOLD=high" + hint);
  CHECK_THAT(usage_message({"--straggler_window", "0.5", "x"}),
             Catch::StartsWith("--straggler_window 0.5: not a number of seconds from 1 to 86400"));
  CHECK(usage_message({"x"}, {{"PET_TRACE_FILE", ""}}) == "PET_TRACE_FILE=: empty path; give the file to write the trace to");
}

TEST_CASE("run summary: step columns and JSON only for ranks that marked steps") {
  AttemptResult a;
  for (int r = 0; r < 2; ++r) {
    WorkerExit w;
    w.rank = w.local_rank = r;
    w.pid = 100 + r;
    if (r == 1) {
      RankStepStats st;
      st.rank = 1;
      st.steps = 120;
      st.step_ms_median = 61.5;
      st.step_ms_p90 = 70.25;
      st.work_ms_median = 59;
      st.wait_share = 0.04;
      st.relative_score = 0.51;
      w.steps = st;
    }
    a.exits.push_back(w);
  }
  RunTotals t;
  const std::string table = format_run_summary({a}, t);
  CHECK_THAT(table, Catch::Contains("max_rss   steps  step_ms   p90_ms  work_ms  wait  score\n"));
  CHECK_THAT(table, Catch::Contains("     120     61.5     70.2     59.0    4%   0.51\n"));
  CHECK_THAT(table, Catch::Contains("       -        -        -        -     -      -\n"));
  const std::string json = format_summary_json({a}, t);
  CHECK_THAT(json, Catch::Contains("\"steps\": null") && Catch::Contains("\"steps\": {\"steps\": 120, ") &&
                       Catch::Contains("\"relative_score\": 0.510"));
  a.exits[1].steps.reset();
  CHECK_THAT(format_run_summary({a}, t), !Catch::Contains("step_ms"));
}

TEST_CASE("straggler scores across nodes: the windows the nodes share name a slow rank of another node") {
  const std::string text = format_node_window("node-a", {{0, 0, "", 30.5, 0.48, 40}, {1, 1, "", 31, 0.5, 40}}) + "|" +
                           format_node_window("b;x", {{2, 0, "", 61.25, 0.01, 40}}) + "|garbage|c;1:2";
  CHECK(text == "node-a;0:0:30.500:0.4800:40,1:1:31.000:0.5000:40|b_x;2:0:61.250:0.0100:40|garbage|c;1:2");
  const auto job = parse_job_windows(text, 3);
  REQUIRE(job.size() == 3);  // the parts that do not parse are left out
  CHECK(job[2].rank == 2);
  CHECK(job[2].host == "b_x");
  CHECK(job[2].work_ms == Approx(61.25));
  CHECK(parse_rdzv_line("job_steps " + text).kind == RdzvEvent::JobSteps);
  CHECK(parse_rdzv_line("job_steps " + text).text == text);

  // This node has ranks 0 and 1 (its own steps win over its shared window); rank 2 is on node b.
  StragglerScores scores(window(2));
  for (const StepRecord& s : lockstep({30, 31}, 40)) scores.add(s);
  const auto v = scores.evaluate(1000 * kMs + 2500 * kMs, job);
  REQUIRE(v);
  CHECK(v->rank == 2);
  CHECK(v->host == "b_x");
  CHECK(v->ranks == 3);
  CHECK(v->score == Approx(30.0 / 61.25));
  CHECK_THAT(format_straggler_line(*v, "node-a"), Catch::StartsWith("ddp-launch: rank 2 (host b_x, local_rank 0) is a straggler"));
  REQUIRE(scores.local_window().size() == 2);  // what this node shares next
  CHECK(scores.local_window()[0].steps == 40);
  CHECK(scores.windows() == 1);
}

// Issue 51 item 3: a client of the store's protocol forged windows that made
// every launcher name "rank 7 (host \x1b]0, ...)" in a 2-rank job.
TEST_CASE("straggler scores across nodes: a forged window's rank beyond the world and control bytes are dropped") {
  const std::string text = "\x1b]0;pwned\x07;7:0:900.000:0.0000:40|h\x1b[2J;1:0:50.000:0.0000:40|x;-1:0:1:0:1|y;0:-3:1:0:1";
  const auto job = parse_job_windows(text, 2);
  REQUIRE(job.size() == 1);  // rank 7 of 2, rank -1 and local_rank -3 are not ranks of this job
  CHECK(job[0].rank == 1);
  CHECK(job[0].host == "h_[2J");
  CHECK(format_node_window("a\x1b]0\x07" "b\x7f", {{0, 0, "", 1, 0, 1}}).rfind("a_]0_b_;", 0) == 0);
}
