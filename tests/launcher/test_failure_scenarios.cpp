// Black-box scenarios: a worker fails and the real ddp-launch tears the
// group down and reports it (exit codes, signals, error files, the root
// cause, workers never started, a spawn the process limit refuses, a
// signal during the teardown).
#include <catch2/catch.hpp>

#include "scenario_processes.h"
#include "scenario_util.h"
#include "test_support.h"
#include "test_skip.h"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

const std::string& kWorker = scenario_worker();

// Pids whose command line contains `needle` (NUL-separated argv joined by spaces).
std::vector<pid_t> pids_running(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_file(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) != std::string::npos && pid_alive(std::stoi(name))) out.push_back(std::stoi(name));
  }
  return out;
}

int count_lines(const std::string& path) {
  std::string t = read_file(path);
  return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
}

}  // namespace

TEST_CASE("a failing worker tears the group down and its exit code is the launcher's") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=3", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "fail", {{"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}}), 60);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("worker group FAILED"));
  CHECK_THAT(r.output, Catch::Contains("rank       : 1 (local_rank: 1)"));
  CHECK_THAT(r.output, Catch::Contains("exitcode   : 3"));
  CHECK_THAT(r.output, Catch::Contains("pid        : " + std::to_string(pid_of(out, 1))));
  // The others were stopped with SIGTERM, not left running.
  CHECK(read_file(out.file("got.0")) == "TERM\n");
  CHECK(read_file(out.file("got.2")) == "TERM\n");
  CHECK_FALSE(pid_alive(pid_of(out, 0)));
  CHECK_FALSE(pid_alive(pid_of(out, 2)));
}

TEST_CASE("a worker killed by SIGSEGV gives 139 and names the signal") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "segv"), 60);
  CHECK(r.exit_code == 128 + SIGSEGV);
  CHECK_THAT(r.output, Catch::Contains("signal 11 (SIGSEGV)"));
  CHECK_THAT(r.output, Catch::Contains("rank       : 1 (local_rank: 1)"));
}

TEST_CASE("the worker's error file message is in the report") {
  TempDir out;
  // TMPDIR: the run directory, kept since the report names its error file, goes with `out`.
  auto r = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "errorfile", {{"TMPDIR", out.path()}}), 60);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("message    : ValueError: loss is NaN at step 7"));
  CHECK_THAT(r.output, Catch::Contains("File \"train.py\", line 3"));
}

TEST_CASE("the error files a failure report names still exist after the launcher exits") {
  TempDir out, tmp, cwd;
  auto r = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "errorfile", {{"TMPDIR", tmp.path()}}), 60, cwd.path());
  INFO(r.output);
  CHECK(r.exit_code == 1);
  const std::string error_file = report_value(r.output, "  error_file");
  REQUIRE_THAT(error_file, Catch::StartsWith(tmp.path() + "/ddp-launch-"));
  // The watchdog (in the launcher's cwd) cleans up after the launcher: wait
  // until it is gone, then the file must still be there.
  auto watchdog_alive = [&] {
    for (const auto& e : fs::directory_iterator("/proc")) {
      std::error_code ec;
      if (read_file(e.path() / "comm") == "ddp-watchdog\n" && fs::read_symlink(e.path() / "cwd", ec) == cwd.path())
        return true;
    }
    return false;
  };
  REQUIRE(wait_until([&] { return !watchdog_alive(); }, 30));
  CHECK(fs::exists(error_file));
  CHECK_THAT(read_file(error_file), Catch::Contains("loss is NaN"));
  CHECK_THAT(r.output, Catch::Contains("error files above are kept in " + fs::path(error_file).parent_path().string()));

  // A failure whose report names no file leaves nothing behind.
  TempDir out2, tmp2;
  auto f = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out2, "fail", {{"TMPDIR", tmp2.path()}, {"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}}), 60);
  CHECK(f.exit_code == 3);
  CHECK(wait_until([&] { return fs::is_empty(tmp2.path()); }, 10));

  // Nor does a run that succeeds after a restart: no report names the
  // first attempt's error file (nor does --summary_json, which would name a
  // file that is gone).
  TempDir out3, tmp3;
  auto ok = run({launcher(), "--nproc_per_node=2", "--max_restarts=1", "--master_port=" + std::to_string(free_port()),
                 "--summary_json", out3.file("s.json"), kWorker},
                scenario_env(out3, "restart_errorfile", {{"TMPDIR", tmp3.path()}}), 60);
  INFO(ok.output);
  CHECK(ok.exit_code == 0);
  CHECK(wait_until([&] { return fs::is_empty(tmp3.path()); }, 10));
  CHECK_THAT(read_file(out3.file("s.json")), !Catch::Contains(tmp3.path()));
}

TEST_CASE("a failure while hundreds of workers start: the summary says which were never started") {
  // issue 23 item 15.
  TempDir out;
  const std::string json = out.file("s.json");
  const auto r = run({launcher(), "--standalone", "--use_env", "--nproc_per_node", "200", "--summary_json", json, "sh",
                      "-c", "[ $RANK = 0 ] && exit 3; exec sleep 30"},
                     {}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 3);
  // Rank 0 fails within milliseconds; starting 200 workers takes far longer.
  const auto at = r.output.find(" were never started: the attempt was stopped before their turn");
  REQUIRE(at != std::string::npos);
  const auto open = r.output.rfind('(', at);
  const int never = std::stoi(r.output.substr(open + 1));
  int rows = 0;
  for (auto p = r.output.find("\n     "); p != std::string::npos; p = r.output.find("\n     ", p + 1)) ++rows;
  CHECK(never > 0);
  CHECK(rows + never == 200);  // every worker is either a row or never started
  CHECK_THAT(read_file(json), Catch::Contains("\"never_started\": ["));
}

TEST_CASE("a spawn refused by the process limit tears down, reports the limit and exits") {
  if (::geteuid() != 0) DDP_SKIP("needs root to run the launcher as 'nobody' (RLIMIT_NPROC does not bind root)");
  if (!fs::exists("/usr/bin/setpriv") || !fs::exists("/usr/bin/prlimit")) DDP_SKIP("setpriv/prlimit not installed");
  TempDir tmp;
  ::chmod(tmp.path().c_str(), 0777);  // the launcher runs as nobody and makes its run directory here
  // A copy nobody can execute wherever the build tree lives (a clone under
  // /root is not searchable for other users).
  const std::string launcher_copy = tmp.file("ddp-launch");
  fs::copy_file(launcher(), launcher_copy);
  ::chmod(launcher_copy.c_str(), 0755);
  // RLIMIT_NPROC counts every process of the user: allow what nobody already
  // runs, plus the launcher, its watchdog and four workers.
  int existing = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    struct stat st;
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") == std::string::npos && ::stat(e.path().c_str(), &st) == 0 &&
        st.st_uid == 65534)
      ++existing;
  }
  const std::string limit = std::to_string(existing + 6);
  const std::string marker = "987.25" + std::to_string(::getpid() % 100);  // sleep's unique argument
  auto r = run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/prlimit",
                "--nproc=" + limit + ":" + limit, launcher_copy, "--standalone", "--use_env", "--nproc_per_node=8",
                "--shutdown_timeout=10", "/bin/sleep", marker},
               {{"TMPDIR", tmp.path()}}, 60);
  INFO(r.output);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("cannot start worker local_rank ") && Catch::Contains("fork failed") &&
                           Catch::Contains("ulimit -u") && Catch::Contains("give --nproc_per_node "));
  CHECK(wait_until([&] { return pids_running("sleep " + marker).empty(); }, 10));  // what started is gone
  CHECK(wait_until([&] { return run_dirs_in(tmp.path()).empty(); }, 10));
}

TEST_CASE("the root cause is the earliest failure, not the first one reaped") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "early_error", {{"TMPDIR", out.path()}}), 60);  // the kept run directory goes with `out`
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("rank       : 0 (local_rank: 0)"));
  CHECK_THAT(r.output, Catch::Contains("message    : OSError: [Errno 22] Invalid argument: /proc/self/metrics.jsonl"));
  // The later failure is listed with its own message.
  CHECK_THAT(r.output, Catch::Contains("    message: RuntimeError: allreduce: Connection reset by peer"));
}

TEST_CASE("a SIGTERM during a failure teardown keeps the root cause's exit code") {
  TempDir out;
  Proc p({launcher(), "--nproc_per_node=2", "--shutdown_timeout=300", "--max_restarts=3",
          "--master_port=" + std::to_string(free_port()), kWorker},
         scenario_env(out, "term_linger"));
  REQUIRE(wait_until([&] { return count_lines(out.file("terms.0")) >= 1; }, 30));  // teardown began
  p.signal(SIGTERM);
  REQUIRE(wait_until([&] { return count_lines(out.file("terms.0")) >= 2; }, 30));  // forwarded
  write_file(out.file("release"), "");
  auto code = p.wait(60);
  REQUIRE(code);
  INFO(p.output());
  CHECK(*code == 9);
  CHECK_THAT(p.output(), Catch::Contains("got SIGTERM while stopping the failed group"));
  CHECK_THAT(p.output(), !Catch::Contains("restarting"));  // the signal ends the job
}
