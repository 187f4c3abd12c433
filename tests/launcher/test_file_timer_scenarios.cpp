// torchrun's file timer under the real ddp-launch (TORCHELASTIC_ENABLE_FILE_TIMER=1),
// with torch's own FileTimerClient / expires() of torch 1.13 (/usr/bin/python3)
// and 2.11 (scripts/install-torch2's venv), and stock torchrun 2.11 on the
// same script side by side. A case whose Python is not installed is skipped.
#include "reference_python.h"
#include "scenario_util.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <unistd.h>

using namespace ddp::test;

namespace {

const std::string& kScript() {
  static const std::string path = source_path("tests/launcher/scripts/file_timer.py");
  return path;
}

// scripts/install-torch2's venv python (DDP_TORCH2_CACHE, else the XDG cache).
std::string torch2_venv_python() {
  const char* cache = std::getenv("DDP_TORCH2_CACHE");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = cache && *cache ? cache
                          : xdg && *xdg   ? std::string(xdg) + "/ddp-launch/torch-2.11.0"
                                          : std::string(home ? home : "/root") + "/.cache/ddp-launch/torch-2.11.0";
  return dir + "/venv/bin/python3";
}

bool installed(const std::string& python) { return ::access(python.c_str(), X_OK) == 0; }

#define FILE_TIMER_PYTHON_OR_SKIP(python) \
  if (!installed(python)) DDP_SKIP(std::string(python) + " is not installed (scripts/install-torch2 makes the 2.11 venv)")

// A run whose script could not import torch's timer client (no torch, or
// one without it) is skipped, not failed: importing torch once more only to
// ask first would cost seconds per case.
#define SKIP_WITHOUT_TIMER_CLIENT(python, result)                                                   \
  if ((result).output.find("ModuleNotFoundError") != std::string::npos ||                           \
      (result).output.find("ImportError") != std::string::npos)                                     \
  DDP_SKIP(std::string(python) + " cannot import torch.distributed.elastic.timer's FileTimerClient:\n" + (result).output)

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The time.time() and pid the script printed before its scope.
std::pair<double, std::string> acquired(const std::string& output) {
  const auto at = output.find("acquired ");
  if (at == std::string::npos) return {0, ""};
  const auto pid_at = output.find(" pid ", at);
  const auto end = output.find('\n', pid_at);
  return {std::atof(output.c_str() + at + 9), output.substr(pid_at + 5, end - pid_at - 5)};
}

std::map<std::string, std::string> timer_env(const std::string& python, std::map<std::string, std::string> extra = {}) {
  extra["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1";
  extra["TORCHELASTIC_TIMER_FILE"] = "\x01unset";
  extra["PYTHON_EXEC"] = python;
  extra["OMP_NUM_THREADS"] = "1";
  extra["LOGLEVEL"] = "\x01unset";
  return extra;
}

// ddp-launch: rank 1 of 2 lets its scope expire; the report names it, exit 124.
void expired_scope_ends_the_job(const std::string& python) {
  const auto r = run({launcher(), "--use_env", "--standalone", "--nproc_per_node=2", kScript(), "expire"},
                     timer_env(python, {{"EXPIRE_RANK", "1"}}), 60);
  const double ended = now_s();
  SKIP_WITHOUT_TIMER_CLIENT(python, r);
  INFO(r.output);
  CHECK(r.exit_code == 124);
  CHECK_THAT(r.output, !Catch::Contains("survived"));
  const auto [at, pid] = acquired(r.output);
  REQUIRE(!pid.empty());
  // Killed by its timer, not at the end of its 10 s sleep.
  CHECK(ended - at < 9.0);
  std::cerr << "file timer (" << python << "): the launcher ended " << ended - at << " s after the 1 s scope's acquire"
            << std::endl;
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: rank 1 (local_rank 1, pid " + pid +
                                       "): timer scope 'load_batch' expired (acquired for 1.0 s at "));
  CHECK_THAT(r.output, Catch::Contains("; sent SIGKILL)"));
  CHECK(report_value(r.output, "rank      ") == "1 (local_rank: 1)");
  CHECK(report_value(r.output, "pid       ") == pid);
  CHECK_THAT(report_value(r.output, "exitcode  "), Catch::StartsWith("124 (timer scope 'load_batch' expired"));
  CHECK_THAT(report_value(r.output, "message   "),
             Catch::StartsWith("rank 1 (local_rank 1, pid " + pid + "): timer scope 'load_batch' expired"));
}

}  // namespace

TEST_CASE("file timer, torch 1.13's client: an expired scope kills its worker, the report names rank, pid and scope, exit 124") {
  FILE_TIMER_PYTHON_OR_SKIP("/usr/bin/python3");
  expired_scope_ends_the_job("/usr/bin/python3");
}

TEST_CASE("file timer, torch 2.11's client: an expired scope kills its worker, the report names rank, pid and scope, exit 124") {
  const std::string py = torch2_venv_python();
  FILE_TIMER_PYTHON_OR_SKIP(py);
  expired_scope_ends_the_job(py);
}

TEST_CASE("file timer: a scope released in time changes nothing (exit 0)") {
  const std::string py = installed("/usr/bin/python3") ? "/usr/bin/python3" : torch2_venv_python();
  FILE_TIMER_PYTHON_OR_SKIP(py);
  const auto r = run({launcher(), "--use_env", "--standalone", "--nproc_per_node=1", kScript(), "release"}, timer_env(py), 60);
  SKIP_WITHOUT_TIMER_CLIENT(py, r);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("released") && !Catch::Contains("expired") && !Catch::Contains("warning"));
}

TEST_CASE("file timer: --max_restarts applies to an expired scope, and the user's TORCHELASTIC_TIMER_FILE is the pipe") {
  const std::string py = installed("/usr/bin/python3") ? "/usr/bin/python3" : torch2_venv_python();
  FILE_TIMER_PYTHON_OR_SKIP(py);
  TempDir dir;
  const std::string pipe = dir.file("my_timer");
  auto env = timer_env(py);
  env["TORCHELASTIC_TIMER_FILE"] = pipe;
  const auto r = run({launcher(), "--use_env", "--standalone", "--nproc_per_node=1", "--max_restarts=1", kScript(), "expire"}, env, 60);
  SKIP_WITHOUT_TIMER_CLIENT(py, r);
  INFO(r.output);
  CHECK(r.exit_code == 124);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: attempt 0 failed: rank 0 timer scope 'load_batch' expired") &&
                           Catch::Contains("restarting the group (restart 1 of 1)"));
  CHECK_THAT(r.output, Catch::Contains("Earlier attempt 0 root cause:"));
  CHECK_THAT(r.output, !Catch::Contains("survived"));
  CHECK(::access(pipe.c_str(), F_OK) != 0);  // removed at the end, as torchrun's stop() does
}

// What stock torchrun 2.11 does with the same script (docs/migration.md):
// the scope's worker gets SIGKILL, then torchrun SIGKILLs itself (exit 137)
// without a word at the default log level, leaving its pipe in $TMPDIR.
TEST_CASE("file timer: side by side with stock torchrun 2.11 on the same script") {
  const std::string py = torch2_venv_python();
  FILE_TIMER_PYTHON_OR_SKIP(py);
  TempDir tmp;  // torchrun's pipe lands here, and is removed with it
  auto env = timer_env(py, {{"TMPDIR", tmp.path()}});
  const auto theirs = run({py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", kScript(), "expire"},
                          env, 60);
  SKIP_WITHOUT_TIMER_CLIENT(py, theirs);
  const auto ours = run({launcher(), "--use_env", "--standalone", "--nproc_per_node=1", kScript(), "expire"}, env, 60);
  INFO("--- torchrun 2.11:\n" << theirs.output << "\n--- ddp-launch:\n" << ours.output);
  CHECK(theirs.exit_code == 137);
  CHECK_THAT(theirs.output, !Catch::Contains("survived") && !Catch::Contains("load_batch"));
  CHECK(ours.exit_code == 124);
  CHECK_THAT(ours.output, !Catch::Contains("survived") && Catch::Contains("timer scope 'load_batch' expired"));
}

// The same protocol from a shell worker (scripts/file_timer.sh): fast, and
// able to make what a Python client does not.
namespace {

ProcResult shell_case(const std::string& which) {
  return run({launcher(), "--use_env", "--standalone", "--nproc_per_node=1",
              source_path("tests/launcher/scripts/file_timer.sh"), which},
             {{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", "\x01unset"}, {"OMP_NUM_THREADS", "1"}},
             60);
}

std::string held_by(const std::string& output) {
  const auto at = output.find("held by ");
  return at == std::string::npos ? "" : output.substr(at + 8, output.find('\n', at) - at - 8);
}

}  // namespace

TEST_CASE("file timer: a worker's child that lets its scope expire is killed, and the report names the rank and the child's pid") {
  const auto r = shell_case("child");
  INFO(r.output);
  CHECK(r.exit_code == 124);
  const std::string child = held_by(r.output);
  REQUIRE(!child.empty());
  CHECK_THAT(r.output, !Catch::Contains("survived"));
  CHECK_THAT(report_value(r.output, "message   "),
             Catch::StartsWith("rank 0 (local_rank 0, pid " + child + "): timer scope 'child_load' expired") &&
                 Catch::EndsWith("; sent SIGKILL)"));
  // The worker itself (the child's parent) was stopped by the teardown.
  CHECK(report_value(r.output, "exitcode  ") ==
        "124 (timer scope 'child_load' expired; the worker ended with signal 15 (SIGTERM))");
}

TEST_CASE("file timer: a scope's own signal is sent (SIGTERM here), and a worker that handles it still fails with 124") {
  const auto r = shell_case("term");
  INFO(r.output);
  CHECK(r.exit_code == 124);
  CHECK_THAT(r.output, Catch::Contains("got SIGTERM") && !Catch::Contains("survived"));
  CHECK_THAT(report_value(r.output, "message   "),
             Catch::Contains("timer scope 'term_me' expired") && Catch::EndsWith("; sent SIGTERM)"));
  CHECK(report_value(r.output, "exitcode  ") == "124 (timer scope 'term_me' expired; the worker ended with exit code 5)");
}

TEST_CASE("file timer: a scope with signal 0 is said when it expires and nothing else happens, as in torchrun") {
  const auto r = shell_case("quiet");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("timer scope 'quiet_scope' expired; it asked for no signal, so it is left running"));
}

TEST_CASE("file timer: lines that are no request, and a request naming the launcher itself, are ignored with one warning") {
  const auto r = shell_case("garbage");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: warning: ignored a file-timer request on ") &&
                           Catch::Contains("/watchdog_timer: not JSON in 'garbage'; further bad requests are ignored"));
  size_t warnings = 0;
  for (auto at = r.output.find("ddp-launch: warning"); at != std::string::npos; at = r.output.find("ddp-launch: warning", at + 1))
    ++warnings;
  CHECK(warnings == 1);
  // The launcher's own pid (the worker's parent) was not timed: nothing expired, nobody was killed.
  CHECK_THAT(r.output, Catch::Contains("done") && !Catch::Contains("expired"));
}
