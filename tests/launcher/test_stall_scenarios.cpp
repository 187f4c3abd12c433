// --stall_timeout with the real ddp-launch: a C++ worker whose heartbeat
// stops (programs/heartbeat_worker.cpp), a plain Python Gloo job whose rank 1
// sleeps before an allreduce, and a slow job without the option. Every wait
// is on a condition with a deadline; the bound on the detection is the
// feature's (stall_timeout + 2 s), not a speed goal.
#include "reference_python.h"
#include "scenario_util.h"
#include "stack_tools.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <unistd.h>

using namespace ddp::test;
namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

namespace {

std::string heartbeat_worker() { return bin_path("ddp-heartbeat-test-worker"); }

}  // namespace

TEST_CASE("stall: rank 1's heartbeat stops and the job ends 124 within stall_timeout + 2 s naming rank 1 as root cause") {
  TempDir out;
  Proc p({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "5",
          heartbeat_worker()},
         {{"OUT", out.path()}, {"STALL_AFTER", "100"}, {"TMPDIR", out.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("stopped")); }, 30));
  const auto stopped = SteadyClock::now();
  const auto code = p.wait(30);
  const double took = std::chrono::duration<double>(SteadyClock::now() - stopped).count();
  const std::string o = p.output();
  INFO(o);
  REQUIRE(code);
  CHECK(*code == 124);
  CHECK(took >= 4.5);  // never before the timeout (the marker follows the last heartbeat by microseconds)
  CHECK(took <= 7.0);
  CHECK(report_value(o, "  rank      ") == "1 (local_rank: 1)");
  CHECK_THAT(report_value(o, "  exitcode  "), Catch::StartsWith("124 (stalled; ended by the launcher: signal 15 (SIGTERM))"));
  const std::string msg = report_value(o, "  message   ");
  CHECK_THAT(msg, Catch::StartsWith("rank 1 (local_rank 1, pid ") && Catch::Contains(") stalled: no progress for ") &&
                      Catch::EndsWith(" s; rank 1 last finished collective #100; rank 0 waits in #101 (allreduce, 1.6 MiB)"));
  // The same line when the launcher decides, before the report.
  CHECK_THAT(o, Catch::Contains("ddp-launch: " + msg + "; stopping the group: SIGTERM now, SIGKILL to any rank still "
                                "there after "));
  // Both ranks' stacks, taken before the teardown, with where each is in the collectives.
  if (!has_native_tool(test_path())) return;  // the dump's own tests skip then
  CHECK_THAT(o, Catch::Contains("ddp-launch: stacks of 2 ranks (stalled) in ") &&
                    Catch::Contains("Stacks (stalled; 2 ranks, ") &&
                    Catch::Contains("  rank 1 last finished collective #100; rank 0 waits in #101 (allreduce, 1.6 MiB)\n"));
  for (int rank = 0; rank < 2; ++rank) CHECK(stack_files(out.path(), rank).size() == 1);
}

TEST_CASE("stall: --max_restarts restarts a stalled group (TORCHELASTIC_RESTART_COUNT 1)") {
  TempDir out;
  auto r = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "1",
                "--max_restarts", "1", heartbeat_worker()},
               {{"OUT", out.path()}, {"STALL_AFTER", "20"}, {"EXIT_ON_RESTART", "1"}}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: attempt 0 failed: rank 1 stalled; ended by the launcher: signal 15 "
                                       "(SIGTERM); restarting the group (restart 1 of 1)"));
  for (const char* rank : {"0", "1"}) {
    CHECK(fs::exists(out.file(std::string("attached.") + rank + ".0")));
    CHECK(fs::exists(out.file(std::string("attached.") + rank + ".1")));
  }
}

namespace {

// A plain Python Gloo job whose rank 1 sleeps before an allreduce, under
// --stall_timeout 2, with the given PATH (with or without py-spy).
void python_stall(const std::string& path, bool py_spy) {
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  TempDir out;
  const std::string script = out.file("sleepy.py");
  write_file(script,
             "import os, time, torch, torch.distributed as dist\n"
             "dist.init_process_group('gloo')\n"
             "if dist.get_rank() == 1:\n"
             "    open(os.path.join(os.environ['OUT'], 'sleeping'), 'w').close()\n"
             "    time.sleep(120)\n"
             "t = torch.ones(4)\n"
             "dist.all_reduce(t)\n");
  auto r = run({launcher(), "--standalone", "--nproc_per_node", "2", "--stall_timeout", "2", script},
               {{"OUT", out.path()}, {"PYTHON_EXEC", py}, {"OMP_NUM_THREADS", "1"}, {"PATH", path},
                {"TMPDIR", out.path()}},
               90);
  INFO(r.output);
  REQUIRE(fs::exists(out.file("sleeping")));
  CHECK(r.exit_code == 124);
  CHECK(report_value(r.output, "  rank      ") == "1 (local_rank: 1)");
  // Without heartbeats the straggler is the rank outside a collective's wait.
  CHECK_THAT(report_value(r.output, "  message   "),
             Catch::StartsWith("rank 1 (local_rank 1, pid ") &&
                 Catch::Contains("; no rank used CPU time or wrote output that the launcher sees; rank 0 waits in a "
                                 "futex (where a collective waits), rank 1 does not"));
  if (!has_native_tool(path)) return;
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: stacks of 2 ranks (stalled) in "));
  for (int rank = 0; rank < 2; ++rank) CHECK(stack_files(out.path(), rank).size() == 1);
  if (py_spy) {  // rank 1's Python frames name the line it sleeps on, rank 0's the allreduce
    CHECK_THAT(r.output, Catch::Contains("<module> (sleepy.py:5)") && Catch::Contains("<module> (sleepy.py:7)"));
    CHECK_THAT(r.output, !Catch::Contains("py-spy is not on PATH"));
  } else {
    CHECK_THAT(r.output, Catch::Contains("  note: py-spy is not on PATH: no Python frames (pip install py-spy)\n"));
  }
}

}  // namespace

TEST_CASE("stall: a plain Python Gloo job whose rank 1 sleeps before an allreduce ends 124 naming rank 1 (no py-spy)", "[torch]") {
  const std::string path = "/usr/bin:/bin";
  if (!on_path(path, "py-spy").empty()) DDP_SKIP("py-spy is installed in /usr/bin or /bin");
  python_stall(path, false);
}

TEST_CASE("stall: the same Python job with py-spy on PATH shows each rank's Python line in the stacks", "[torch]") {
  const std::string spy = py_spy_dir();
  if (spy.empty()) DDP_SKIP("py-spy is not installed (pip install py-spy, or scripts/install-py-spy)");
  python_stall(spy + ":" + test_path(), true);
}

TEST_CASE("stall: without --stall_timeout a job that idles runs to its end while with it the same job stalls") {
  TempDir out;
  const std::string w = out.file("slow.sh");
  write_file(w, "#!/bin/sh\nsleep 3\n", true);
  auto plain = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", w}, {}, 60);
  INFO(plain.output);
  CHECK(plain.exit_code == 0);
  CHECK_THAT(plain.output, !Catch::Contains("stalled"));
  auto watched = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "1", w},
                     {}, 60);
  INFO(watched.output);
  CHECK(watched.exit_code == 124);
  CHECK_THAT(watched.output, Catch::Contains(") stalled: no progress for "));
}

TEST_CASE("stall: output the launcher sees (any stderr, tee'd stdout) is progress, stdout without the tee is not") {
  TempDir out;
  // A line every 0.5 s, hardly any CPU time (the shell forks one sleep per line).
  const std::string w = out.file("chatty.sh");
  write_file(w, "#!/bin/sh\ni=0\nwhile [ $i -lt 8 ]; do echo \"tick $i\"; sleep 0.5; i=$((i+1)); done\n", true);
  auto teed = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "1.5",
                   "--tee", "3", "--log_dir", out.file("logs"), w},
                  {}, 60);
  INFO(teed.output);
  CHECK(teed.exit_code == 0);
  CHECK_THAT(teed.output, Catch::Contains("[default1]:tick 7") && !Catch::Contains("stalled"));
  auto direct = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "1.5", w},
                    {}, 60);
  INFO(direct.output);
  CHECK(direct.exit_code == 124);
  // stderr always passes through the launcher (stderr_relay.h): progress without a tee.
  const std::string e = out.file("chatty_stderr.sh");
  write_file(e, "#!/bin/sh\ni=0\nwhile [ $i -lt 8 ]; do echo \"tick $i\" >&2; sleep 0.5; i=$((i+1)); done\n", true);
  auto to_stderr = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "1.5", e},
                       {}, 60);
  INFO(to_stderr.output);
  CHECK(to_stderr.exit_code == 0);
  CHECK_THAT(to_stderr.output, Catch::Contains("tick 7") && !Catch::Contains("stalled"));
}

TEST_CASE("stall: when the teardown reaches --shutdown_timeout, the report still shows the stall's stacks") {
  // issue 23 item 8: the report showed the attempt's last dump, the one
  // taken before SIGKILL (where the ranks sat in their SIGTERM handling),
  // not the one that showed where the straggler hung.
  if (!has_native_tool(test_path())) DDP_SKIP("neither eu-stack nor gdb on PATH (apt-get install elfutils)");
  TempDir out;
  const auto r = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "2",
                      "--shutdown_timeout", "1", heartbeat_worker()},
                     {{"OUT", out.path()}, {"STALL_AFTER", "20"}, {"IGNORE_TERM", "1"}, {"TMPDIR", out.path()}}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 124);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: stacks of 2 ranks (stalled) in ") &&
                           Catch::Contains("ddp-launch: stacks of 2 ranks (shutdown_timeout: "));
  const std::string report = r.output.substr(r.output.find("worker group FAILED"));
  CHECK_THAT(report, Catch::Contains("Stacks (stalled; 2 ranks, ") && !Catch::Contains("Stacks (shutdown_timeout"));
}

TEST_CASE("stall: a rank stopped by SIGSTOP inside the collective every rank entered is the root cause, on one node") {
  // issue 23 item 6: both ranks sat in the same collective, the tie went to
  // rank 0, and the message pointed at another node of a --standalone job.
  TempDir out;
  Proc p({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", "--stall_timeout", "2", heartbeat_worker()},
         {{"OUT", out.path()}, {"WAIT_AFTER", "20"}, {"TMPDIR", out.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("waiting.0")) && fs::exists(out.file("waiting.1")); }, 30));
  const pid_t rank1 = static_cast<pid_t>(std::stol(read_file(out.file("waiting.1"))));
  REQUIRE(::kill(rank1, SIGSTOP) == 0);
  const auto code = p.wait(30);
  const std::string o = p.output();
  INFO(o);
  REQUIRE(code);
  CHECK(*code == 124);
  CHECK(report_value(o, "  rank      ") == "1 (local_rank: 1)");
  CHECK_THAT(report_value(o, "  message   "), Catch::Contains(" is stopped (state T: SIGSTOP, SIGTSTP or a debugger; kill -CONT " +
                                                                   std::to_string(rank1) + " continues it)"));
  CHECK_THAT(o, !Catch::Contains("another node"));
}

TEST_CASE("a rank's heartbeat page cannot be truncated from outside: the rank never dies of SIGBUS") {
  // issue 23 item 5: the page was a file in the run directory; another
  // process that truncated it killed the rank mapping it (exit 135).
  TempDir out;
  Proc p({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env", heartbeat_worker()},
         {{"OUT", out.path()}, {"COLLECTIVES", "400"}, {"TMPDIR", out.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("attached.1.0")); }, 30));
  const std::string pid = read_file(out.file("pid.1"));
  // Where the worker's page is, as its environment names it.
  std::string environ = read_file("/proc/" + pid + "/environ"), page;
  for (size_t at = 0; at < environ.size();) {
    const size_t end = environ.find('\0', at);
    const std::string kv = environ.substr(at, end - at);
    if (kv.rfind("DDP_HEARTBEAT_FILE=", 0) == 0) page = kv.substr(19);
    at = end == std::string::npos ? environ.size() : end + 1;
  }
  REQUIRE(!page.empty());
  if (page.rfind("/proc/self/", 0) == 0) page = "/proc/" + pid + page.substr(10);
  CHECK(::truncate(page.c_str(), 0) != 0);
  const auto code = p.wait(60);
  INFO(p.output());
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK_THAT(p.output(), !Catch::Contains("SIGBUS"));
  // No page is a file another process could reach in the run directory.
  for (const auto& e : fs::recursive_directory_iterator(out.path()))
    CHECK_THAT(e.path().string(), !Catch::EndsWith(".heartbeat"));
}
