// run_main: an uncaught exception becomes exit code 1, a message on stderr
// and a torchelastic error file, which ddp-launch shows in its report.
#include <catch2/catch.hpp>

#include <chrono>

#include "ddp/common/error_file.h"
#include "ddp/worker/run_main.h"
#include "reference_python.h"
#include "test_support.h"
#include "worker_test_util.h"
#include "test_skip.h"

using namespace ddp::test;

TEST_CASE("run_main: uncaught exception writes TORCHELASTIC_ERROR_FILE and exits 1") {
  TempDir dir;
  auto env = rank_env(0, 1, free_port());
  env["TORCHELASTIC_ERROR_FILE"] = dir.file("error.json");
  const long long before = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count();
  auto r = run({helper_path(), "throw"}, env, 60);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("DeliberateFailure: deliberate failure from rank 0"));
  auto rec = ddp::read_error_file(dir.file("error.json"));
  REQUIRE(rec.has_value());
  CHECK_THAT(rec->message, Catch::Contains("DeliberateFailure: deliberate failure from rank 0"));
  CHECK_THAT(rec->callstack, Catch::Contains("run_main"));
  CHECK(rec->timestamp >= before);
  CHECK(rec->timestamp <= before + 60);
}

TEST_CASE("run_main: the error file is the one the matching torchrun reads") {
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  TempDir dir;
  auto env = rank_env(0, 1, free_port());
  env["TORCHELASTIC_ERROR_FILE"] = dir.file("error.json");
  auto r = run({helper_path(), "throw"}, env, 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 1);
  auto rec = ddp::read_error_file(dir.file("error.json"));
  REQUIRE(rec.has_value());
  auto p = run({py, source_path("tests/worker/read_error_file.py"), dir.file("error.json")}, {}, 120);
  INFO(p.output);
  REQUIRE(p.exit_code == 0);
  // The message torchrun gets is the runtime's, first line for first line.
  CHECK_THAT(rec->message, Catch::Contains("DeliberateFailure: deliberate failure from rank 0"));
  CHECK_THAT(p.output, Catch::Contains("MESSAGE " + rec->message.substr(0, rec->message.find('\n')) + "\n"));
  CHECK_THAT(p.output, Catch::Contains("TIMESTAMP " + std::to_string(rec->timestamp)));
  // torchrun's report shows the file and the traceback from it.
  CHECK_THAT(p.output, Catch::Contains("error_file: " + dir.file("error.json")));
  REQUIRE_FALSE(rec->callstack.empty());
  CHECK_THAT(p.output, Catch::Contains("traceback : " + rec->callstack.substr(0, rec->callstack.find('\n'))));
}

TEST_CASE("run_main: normal return codes pass through, no error file") {
  TempDir dir;
  auto env = rank_env(0, 1, free_port());
  env["TORCHELASTIC_ERROR_FILE"] = dir.file("error.json");
  auto r = run({helper_path(), "init"}, env, 60);
  CHECK(r.exit_code == 0);
  CHECK(read_file(dir.file("error.json")).empty());
  CHECK(ddp::worker::run_main(0, nullptr, [](int, char**) { return 7; }) == 7);
  CHECK(ddp::worker::describe_exception(std::make_exception_ptr(std::out_of_range("x"))) == "std::out_of_range: x");
}

namespace {

// The helper's `mode` on 2 ranks under `launcher`, on a free port; the run
// directory in `tmp` (the launcher keeps the one its report names).
ddp::test::ProcResult launched(const std::string& launcher, const std::string& mode, const TempDir& tmp) {
  return run({launcher, "--nproc_per_node=2", "--use_env", "--master_port=" + std::to_string(free_port()),
              helper_path(), mode},
             {{"DDP_TIMEOUT_S", "60"}, {"TMPDIR", tmp.path()}}, 90);
}

}  // namespace

TEST_CASE("run_main: ddp-launch's failure report shows the worker's error message") {
  const std::string launcher = bin_path("ddp-launch");
  if (read_file(launcher).empty()) {
    DDP_SKIP(std::string(launcher + " is not built"));
  }
  TempDir tmp;
  auto r = launched(launcher, "throw", tmp);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("DeliberateFailure: deliberate failure from rank"));
  CHECK_THAT(r.output, Catch::Contains("error_file"));
}

TEST_CASE("run_main: a rank that aborts in its exit, after its program returned, is named so by ddp-launch") {
  const std::string launcher = bin_path("ddp-launch");
  if (read_file(launcher).empty()) DDP_SKIP(std::string(launcher + " is not built"));
  TempDir tmp;
  // The process group is gone before the program returns: the heartbeat
  // page stays mapped for run_main's exiting mark.
  auto r = launched(launcher, "abort-at-exit", tmp);
  INFO(r.output);
  CHECK(r.exit_code == 134);
  CHECK_THAT(r.output, Catch::Contains("  rank       : 1 (local_rank: 1)"));
  CHECK_THAT(r.output, Catch::Contains("  in exit    : its program had finished "));
}
