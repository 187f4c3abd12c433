// Black-box scenarios: the real ddp-launch restarts the group (--max_restarts):
// a second attempt that succeeds, restarts exhausted, a program gone before
// the restart, the old group gone before the new one starts.
#include <catch2/catch.hpp>

#include "scenario_util.h"
#include "test_support.h"

#include <csignal>
#include <filesystem>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

const std::string& kWorker = scenario_worker();

}  // namespace

TEST_CASE("a restart that succeeds on the second attempt") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=2", "--max_restarts=1", "--master_port=" + std::to_string(free_port()),
                kWorker},
               scenario_env(out, "restart"), 60);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("attempt 0 failed: rank 1 exit code 4; restarting the group (restart 1 of 1)"));
  CHECK(read_file(out.file("attempt.0")) == "1\n");
  CHECK(read_file(out.file("attempt.1")) == "1\n");
}

TEST_CASE("restarts exhausted: every attempt's root cause, the last one's exit code") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=1", "--max_restarts=2", "--master_port=" + std::to_string(free_port()),
                kWorker},
               scenario_env(out, "alwaysfail"), 60);
  CHECK(r.exit_code == 7);  // 5 + restart count 2
  CHECK_THAT(r.output, Catch::Contains("Earlier attempt 0 root cause"));
  CHECK_THAT(r.output, Catch::Contains("Earlier attempt 1 root cause"));
  CHECK_THAT(r.output, Catch::Contains("exitcode   : 5"));
  CHECK_THAT(r.output, Catch::Contains("exitcode   : 6"));
  CHECK_THAT(r.output, Catch::Contains("exitcode   : 7"));
}

TEST_CASE("a program that vanishes before a restart exits 127 like a shell") {
  TempDir out;
  std::string copy = out.file("vanishing-worker.sh");
  fs::copy_file(kWorker, copy);
  auto r = run({launcher(), "--nproc_per_node=1", "--max_restarts=1", "--master_port=" + std::to_string(free_port()), copy},
               scenario_env(out, "vanish"), 60);
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.output, Catch::Contains("cannot execute " + copy));
}

TEST_CASE("a restart waits until every process of the old group is gone") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=2", "--max_restarts=1", "--master_port=" + std::to_string(free_port()),
                kWorker},
               scenario_env(out, "linger"), 60);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  // Rank 0's child of attempt 0 finished its SIGTERM cleanup before attempt 1 began.
  CHECK(read_file(out.file("saw_gc_done.0")) == "yes\n");
}
