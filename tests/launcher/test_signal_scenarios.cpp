// Black-box scenarios: signals to and from the real ddp-launch (forwarding,
// a second Ctrl-C, SIGKILL of the launcher, the grace period before SIGKILL,
// orphans reaped, stopped workers, leftovers of a successful job).
#include <catch2/catch.hpp>

#include "scenario_processes.h"
#include "scenario_util.h"
#include "test_support.h"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>
#include <vector>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

const std::string& kWorker = scenario_worker();

}  // namespace

TEST_CASE("signals to the launcher are forwarded to every worker") {
  const int sig = GENERATE(SIGTERM, SIGINT, SIGHUP, SIGQUIT);
  const std::string name = sig == SIGTERM ? "TERM" : sig == SIGINT ? "INT" : sig == SIGHUP ? "HUP" : "QUIT";
  INFO("signal " << name);
  TempDir out;
  // TMPDIR: SIGQUIT's stack dump keeps the run directory (test_stack_scenarios.cpp).
  Proc p({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
         scenario_env(out, "record", {{"TMPDIR", out.path()}}));
  REQUIRE(wait_until([&] { return files_exist(out, "ready", 2); }, 30));
  p.signal(sig);
  auto code = p.wait(30);
  REQUIRE(code);
  CHECK(*code == 128 + sig);
  CHECK(read_file(out.file("got.0")) == name + "\n");
  CHECK(read_file(out.file("got.1")) == name + "\n");
  CHECK_THAT(p.output(), Catch::Contains("stopped by SIG" + name));
}

TEST_CASE("signals_to_handle SIGUSR1: forwarded to every worker with the option, not caught without it") {
  {
    TempDir out;
    Proc p({launcher(), "--nproc_per_node=2", "--signals-to-handle=SIGTERM,SIGINT,SIGUSR1",
            "--master_port=" + std::to_string(free_port()), kWorker},
           scenario_env(out, "record"));
    REQUIRE(wait_until([&] { return files_exist(out, "ready", 2); }, 30));
    p.signal(SIGUSR1);
    auto code = p.wait(30);
    REQUIRE(code);
    CHECK(*code == 128 + SIGUSR1);
    CHECK(read_file(out.file("got.0")) == "USR1\n");
    CHECK(read_file(out.file("got.1")) == "USR1\n");
    CHECK_THAT(p.output(), Catch::Contains("stopped by SIGUSR1"));
  }
  {
    // The default list: SIGUSR1's default action ends the launcher, and its
    // workers die by their death signal without seeing SIGUSR1.
    TempDir out;
    Proc p({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
           scenario_env(out, "record"));
    REQUIRE(wait_until([&] { return files_exist(out, "ready", 2); }, 30));
    const std::vector<pid_t> pids{pid_of(out, 0), pid_of(out, 1)};
    p.signal(SIGUSR1);
    auto code = p.wait(30);
    REQUIRE(code);
    CHECK(*code == 128 + SIGUSR1);
    CHECK(all_gone_within(pids, 10));
    CHECK_FALSE(fs::exists(out.file("got.0")));
    CHECK_FALSE(fs::exists(out.file("got.1")));
  }
}

TEST_CASE("a second SIGINT kills at once") {
  TempDir out;
  Proc p({launcher(), "--nproc_per_node=2", "--shutdown_timeout=300", "--master_port=" + std::to_string(free_port()),
          kWorker},
         scenario_env(out, "record_int"));
  REQUIRE(wait_until([&] { return files_exist(out, "ready", 2); }, 30));
  p.signal(SIGINT);
  REQUIRE(wait_until([&] { return files_exist(out, "got", 2); }, 30));
  CHECK(p.running());  // workers ignored it; the launcher waits out the grace period
  // A person's second Ctrl-C, not the same one seen twice (kSecondSigintAfterS).
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  p.signal(SIGINT);
  auto code = p.wait(60);  // far below the 300 s grace
  REQUIRE(code);
  CHECK(*code == 128 + SIGINT);
  CHECK(wait_until([&] { return !pid_alive(pid_of(out, 0)) && !pid_alive(pid_of(out, 1)); }, 10));
}

TEST_CASE("one Ctrl-C delivered twice at once (terminal and timeout) is forwarded, not a SIGKILL") {
  // issue 23 item 11: the second copy, microseconds after the first, was
  // taken for a second Ctrl-C and the workers were killed without cleanup.
  TempDir out;
  Proc p({launcher(), "--nproc_per_node=2", "--shutdown_timeout=300", "--master_port=" + std::to_string(free_port()),
          kWorker},
         scenario_env(out, "record_int"));
  REQUIRE(wait_until([&] { return files_exist(out, "ready", 2); }, 30));
  p.signal(SIGINT);
  // The copy comes after the launcher read the first (two at once would be
  // one pending signal), well within kSecondSigintAfterS.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p.signal(SIGINT);
  REQUIRE(wait_until([&] { return files_exist(out, "got", 2); }, 30));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(p.running());  // in the grace period: the workers handle SIGINT as they choose
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  p.signal(SIGINT);  // now a second Ctrl-C
  auto code = p.wait(60);
  REQUIRE(code);
  CHECK(*code == 128 + SIGINT);
}

TEST_CASE("SIGKILL of the launcher leaves no worker alive") {
  TempDir out;
  // A SIGKILLed launcher cannot remove its run directory: keep it in `out`.
  Proc p({launcher(), "--nproc_per_node=3", "--master_port=" + std::to_string(free_port()), kWorker},
         scenario_env(out, "sleep", {{"TMPDIR", out.path()}}));
  REQUIRE(wait_until([&] { return files_exist(out, "ready", 3); }, 30));
  std::vector<pid_t> pids{pid_of(out, 0), pid_of(out, 1), pid_of(out, 2)};
  for (pid_t pid : pids) REQUIRE(pid_alive(pid));
  p.signal(SIGKILL);
  REQUIRE(p.wait(10));
  CHECK(all_gone_within(pids, 10));
}

TEST_CASE("shutdown_timeout escalates to SIGKILL for a worker that ignores SIGTERM") {
  TempDir out;
  auto start = std::chrono::steady_clock::now();
  auto r = run({launcher(), "--nproc_per_node=2", "--shutdown_timeout=1", "--master_port=" + std::to_string(free_port()),
                kWorker},
               scenario_env(out, "ignore_term", {{"TMPDIR", out.path()}}), 60);  // the dump before SIGKILL keeps the run dir
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.exit_code == 9);
  CHECK(elapsed >= 1.0);  // it did wait the grace period before killing
  CHECK_THAT(r.output, Catch::Contains("rank 0 (local_rank 0, pid " + std::to_string(pid_of(out, 0)) + "): signal 9 (SIGKILL)"));
  CHECK_FALSE(pid_alive(pid_of(out, 0)));
}

TEST_CASE("the launcher adopts and reaps what a worker leaves behind") {
  TempDir out;
  Proc p({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
         scenario_env(out, "orphan"));
  auto code = p.wait(60);
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK(read_file(out.file("gc_ppid.1")) == std::to_string(p.pid()) + "\n");  // child subreaper
  CHECK(read_file(out.file("gc_state.1")) == "reaped\n");
}

TEST_CASE("SIGKILL of the launcher: workers' children die too and the run directory goes") {
  TempDir out;
  TempDir tmp;
  Proc p({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), kWorker},
         scenario_env(out, "grandchild", {{"TMPDIR", tmp.path()}}));
  REQUIRE(wait_until([&] { return files_exist(out, "ready", 2) && files_exist(out, "gc", 2); }, 30));
  REQUIRE(run_dirs_in(tmp.path()).size() == 1);
  std::vector<pid_t> pids{pid_of(out, 0), pid_of(out, 1), std::stoi(read_file(out.file("gc.0"))),
                          std::stoi(read_file(out.file("gc.1")))};
  for (pid_t pid : pids) REQUIRE(pid_alive(pid));
  p.signal(SIGKILL);
  REQUIRE(p.wait(10));
  CHECK(all_gone_within(pids, 10));
  CHECK(wait_until([&] { return run_dirs_in(tmp.path()).empty(); }, 10));
}

TEST_CASE("a stopped worker is reported and does not hold up the teardown") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=2", "--shutdown_timeout=300", "--master_port=" + std::to_string(free_port()),
                kWorker},
               scenario_env(out, "stop_self"), 60);
  INFO(r.output);
  REQUIRE_FALSE(r.timed_out);  // far below the 300 s grace
  CHECK(r.exit_code == 5);
  CHECK_THAT(r.output, Catch::Contains("rank 1 (local_rank 1, pid " + std::to_string(pid_of(out, 1)) +
                                       ") is stopped by SIGSTOP"));
  CHECK(read_file(out.file("got.1")) == "TERM\n");  // it acted on SIGTERM once continued
}

TEST_CASE("a successful job's leftovers get SIGTERM, and a signal while they linger keeps exit 0") {
  TempDir out;
  Proc p({launcher(), "--nproc_per_node=1", "--shutdown_timeout=300", "--master_port=" + std::to_string(free_port()),
          kWorker},
         scenario_env(out, "leftover"));
  REQUIRE(wait_until([&] { return fs::exists(out.file("got.0")); }, 30));  // the leftover got SIGTERM
  CHECK(p.running());  // and the launcher waits for it
  p.signal(SIGHUP);    // forwarded; the leftover dies of it
  auto code = p.wait(60);
  REQUIRE(code);
  CHECK(*code == 0);  // every worker succeeded
}
