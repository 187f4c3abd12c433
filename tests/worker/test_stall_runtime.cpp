// --stall_timeout end to end with the real runtime: a 2-rank DDP job under
// ddp-launch whose rank 1 stops calling collectives (sleeps in its step).
// The runtime's heartbeats name the straggler and the collective the other
// rank waits in; the stacks of both ranks are dumped before the teardown;
// --max_restarts restarts the group. The bound on the detection is the
// feature's (stall_timeout + 2 s), not a speed goal.
#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <regex>

#include "test_support.h"
#include "worker_test_util.h"

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> stall_job(const TempDir& out, const std::vector<std::string>& launcher_args) {
  std::vector<std::string> argv{bin_path("ddp-launch"), "--standalone", "--use_env", "--nproc_per_node", "2", "--stall_timeout", "5"};
  argv.insert(argv.end(), launcher_args.begin(), launcher_args.end());
  const std::vector<std::string> worker{helper_path(), "stall-step", "stall_rank=1", "stall_at=20", "steps=40",
                                        "out=" + out.path()};
  argv.insert(argv.end(), worker.begin(), worker.end());
  return argv;
}

// "  name      : value" of the failure report.
std::string report_line(const std::string& output, const std::string& name) {
  const auto at = output.find("  " + name);
  if (at == std::string::npos) return "";
  const auto colon = output.find(": ", at);
  return output.substr(colon + 2, output.find('\n', colon) - colon - 2);
}

}  // namespace

TEST_CASE("stall: a runtime rank that stops calling collectives ends the job 124 within 5 + 2 s, named with its collectives and stacks") {
  TempDir out;
  Proc p(stall_job(out, {}), {{"OMP_NUM_THREADS", "1"}, {"TMPDIR", out.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("stalled.1")); }, 60));
  const auto stopped = std::chrono::steady_clock::now();
  const auto code = p.wait(60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();
  const std::string o = p.output();
  INFO(o);
  REQUIRE(code.has_value());
  CHECK(*code == 124);
  CHECK(took <= 7.0);
  CHECK(report_line(o, "rank       ") == "1 (local_rank: 1)");
  // Rank 1 finished the last collective of step 19; rank 0 waits in step 20's first (DDP's forward broadcast or a bucket).
  const std::string msg = report_line(o, "message    ");
  std::smatch m;
  REQUIRE(std::regex_search(msg, m, std::regex("rank 1 last finished collective #([0-9]+); rank 0 waits in #([0-9]+) \\((allreduce|broadcast), ")));
  CHECK(std::stoll(m[2]) == std::stoll(m[1]) + 1);
  CHECK_THAT(msg, Catch::StartsWith("rank 1 (local_rank 1, pid ") && Catch::Contains(") stalled: no progress for "));
  // Both ranks' stacks, told apart (rank 1 sleeps, rank 0 waits in the allreduce).
  CHECK_THAT(o, Catch::Contains("ddp-launch: stacks of 2 ranks (stalled) in "));
  CHECK_THAT(o, Catch::Contains("\n  rank 0: ") && Catch::Contains("\n  rank 1: "));
}

TEST_CASE("stall: --max_restarts 1 restarts a stalled runtime job, which then finishes") {
  TempDir out;
  auto r = run(stall_job(out, {"--max_restarts", "1"}), {{"OMP_NUM_THREADS", "1"}, {"TMPDIR", out.path()}}, 120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: attempt 0 failed: rank 1 stalled") &&
                           Catch::Contains("restarting the group (restart 1 of 1)"));
  CHECK_THAT(r.output, Catch::Contains("stall-step done on rank 0 (restarted)") &&
                           Catch::Contains("stall-step done on rank 1 (restarted)"));
}
