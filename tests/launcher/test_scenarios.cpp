// Black-box scenarios: the real ddp-launch binary with scripts/worker.sh.
// Every wait is on a condition (a file, an exit) with a deadline.
#include "test_skip.h"
#include "scenario_util.h"
#include "ddp/common/free_port.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sched.h>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

const std::string& kWorker = scenario_worker();


int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof(set), &set);
  return CPU_COUNT(&set);
}

pid_t pid_of(const TempDir& out, int rank) { return std::stoi(read_file(out.file("pid." + std::to_string(rank)))); }

bool files_exist(const TempDir& out, const std::string& prefix, int n) {
  for (int r = 0; r < n; ++r)
    if (!fs::exists(out.file(prefix + "." + std::to_string(r)))) return false;
  return true;
}

// The ddp-launch-* run directories under `dir`.
std::vector<std::string> run_dirs_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("ddp-launch-", 0) == 0) out.push_back(e.path());
  return out;
}

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

// True once none of pids is alive (zombies count as gone), within timeout_s.
bool all_gone_within(const std::vector<pid_t>& pids, double timeout_s) {
  return wait_until(
      [&] {
        for (pid_t pid : pids)
          if (pid_alive(pid)) return false;
        return true;
      },
      timeout_s);
}

}  // namespace

TEST_CASE("three workers get torchrun's environment") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=3", "--master_port=" + std::to_string(free_port()), "--max_restarts=2",
                kWorker, "--flag", "v"},
               scenario_env(out, "env", {{"OMP_NUM_THREADS", "\x01unset"}}), 60);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("OMP_NUM_THREADS is not set"));
  std::set<std::string> error_files;
  for (int rank = 0; rank < 3; ++rank) {
    auto env = parse_env_dump(read_file(out.file("env." + std::to_string(rank))));
    INFO("rank " << rank);
    CHECK(env["ARGS"] == "--local_rank=" + std::to_string(rank) + " --flag v");
    CHECK(env["RANK"] == std::to_string(rank));
    CHECK(env["LOCAL_RANK"] == std::to_string(rank));
    CHECK(env["WORLD_SIZE"] == "3");
    CHECK(env["LOCAL_WORLD_SIZE"] == "3");
    CHECK(env["GROUP_RANK"] == "0");
    CHECK(env["GROUP_WORLD_SIZE"] == "1");
    CHECK(env["ROLE_RANK"] == std::to_string(rank));
    CHECK(env["ROLE_NAME"] == "default");
    CHECK(env["ROLE_WORLD_SIZE"] == "3");
    CHECK(env["MASTER_ADDR"] == "127.0.0.1");
    CHECK_FALSE(env["MASTER_PORT"].empty());
    CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "2");
    CHECK(env["TORCHELASTIC_RUN_ID"] == "none");
    CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");
    CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
    CHECK(env["OMP_NUM_THREADS"] == std::to_string(std::max(1, affinity_cpus() / 3)));
    CHECK(env["OUT"] == out.path());  // the parent environment passes through
    const std::string ef = env["TORCHELASTIC_ERROR_FILE"];
    CHECK_THAT(ef, Catch::EndsWith("/attempt_0.rank_" + std::to_string(rank) + ".error.json"));
    error_files.insert(ef);
  }
  CHECK(error_files.size() == 3);
}

TEST_CASE("the run directory is private and removed at exit") {
  TempDir out;
  TempDir tmp;
  auto r = run({launcher(), "--nproc_per_node=1", "--use_env", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "env", {{"TMPDIR", tmp.path()}}), 60);
  REQUIRE(r.exit_code == 0);
  auto env = parse_env_dump(read_file(out.file("env.0")));
  CHECK(env["ARGS"].empty());  // --use_env: no --local_rank
  fs::path run_dir = fs::path(env["TORCHELASTIC_ERROR_FILE"]).parent_path();
  CHECK(read_file(out.file("runmode.0")) == "700\n");  // private while the job runs
  CHECK(run_dir.parent_path() == fs::path(tmp.path()));
  CHECK_FALSE(fs::exists(run_dir));
}

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

TEST_CASE("a program that vanishes before a restart exits 127 like a shell") {
  TempDir out;
  std::string copy = out.file("vanishing-worker.sh");
  fs::copy_file(kWorker, copy);
  auto r = run({launcher(), "--nproc_per_node=1", "--max_restarts=1", "--master_port=" + std::to_string(free_port()), copy},
               scenario_env(out, "vanish"), 60);
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.output, Catch::Contains("cannot execute " + copy));
}

TEST_CASE("python scripts run through python3 -u, modules with -m") {
  TempDir out;
  write_file(out.file("show.py"),
             "import os, sys\n"
             "open(os.path.join(os.environ['OUT'], 'py.' + os.environ['RANK']), 'w').write(' '.join(sys.argv[1:]) + '|' + str(sys.flags.dont_write_bytecode) + '|' + os.environ['LOCAL_RANK'])\n");
  auto r = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), out.file("show.py"), "a"},
               {{"OUT", out.path()}}, 60);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(read_file(out.file("py.1")), Catch::StartsWith("--local_rank=1 a|"));
  fs::create_directories(out.file("pkg"));
  write_file(out.file("pkg/__init__.py"), "");
  fs::copy_file(out.file("show.py"), out.file("pkg/show.py"));
  auto m = run({launcher(), "--nproc_per_node=1", "--use_env", "--master_port=" + std::to_string(free_port()), "-m",
                "pkg.show", "b"},
               {{"OUT", out.path()}, {"PYTHONPATH", out.path()}}, 60);
  REQUIRE(m.exit_code == 0);
  CHECK_THAT(read_file(out.file("py.0")), Catch::StartsWith("b|"));
}

TEST_CASE("PET_ variables configure the launcher") {
  TempDir out;
  auto r = run({launcher(), kWorker},
               scenario_env(out, "env", {{"PET_NPROC_PER_NODE", "3"}, {"PET_USE_ENV", "1"},
                                         {"PET_MASTER_PORT", std::to_string(free_port())}}),
               60);
  REQUIRE(r.exit_code == 0);
  CHECK(files_exist(out, "env", 3));
  CHECK(parse_env_dump(read_file(out.file("env.2")))["ARGS"].empty());
}

TEST_CASE("bad input: one line naming the value, exit 2, no worker started") {
  TempDir out;
  write_file(out.file("not-exec"), "#!/bin/sh\n", false);
  write_file(out.file("script.py"), "print(1)\n", false);
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--bogus", kWorker}, "'--bogus'"},
      {{"--nproc_per_node=0", kWorker}, "'0'"},
      {{"--nproc_per_node=-3", kWorker}, "'-3'"},
      {{"--nproc_per_node=lots", kWorker}, "'lots'"},
      {{"--nnodes=2", "--node_rank=2", kWorker}, "--node_rank 2"},
      {{"--master_port=0", "--nnodes=2", kWorker}, "--master_port 0: port 0 (a free port) works for a one-node job only"},
      {{"--master_port=70000", kWorker}, "70000"},
      {{"--nproc_per_node=2"}, "missing program"},
      {{out.file("not-exec")}, "is not executable"},
      {{"--no_python", out.file("script.py")}, "--no_python"},
      {{out.file("missing-program")}, "not found"},
      {{"--max_restarts=x", kWorker}, "'x'"},
      {{"--nproc_per_node=gpu", kWorker}, "no NVIDIA GPU is visible"},
      {{"--tee", "3:", kWorker}, "--tee: '3:'"},
      {{"--rdzv-backend=c10d", kWorker}, "--rdzv_backend c10d needs --rdzv_endpoint HOST[:PORT]"},
      {{out.path()}, "is a directory"},
      // Checked at start, not after the run (issue 15).
      {{"--summary_json", out.path(), kWorker}, "--summary_json " + out.path() + ": '" + out.path() + "' is a directory"},
      {{"--log_dir", out.file("script.py"), kWorker}, "is not a directory"},
      {{"--master_addr=no-such-host.invalid", "--master_port=" + std::to_string(free_port()), kWorker},
       "--master_addr no-such-host.invalid: the host does not resolve (Name or service not known)"},
      {{"--nnodes=2", "--node_rank=1", "--rdzv_endpoint=no-such-host.invalid:29400", kWorker},
       "--rdzv_endpoint no-such-host.invalid:29400: the host does not resolve"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{launcher()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    INFO("args: " << Catch::Detail::stringify(c.args));
    auto r = run(argv, scenario_env(out, "sleep", {{"CUDA_VISIBLE_DEVICES", ""}}), 30);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::StartsWith("ddp-launch: error: ") && Catch::Contains(c.expect) &&
                             Catch::Contains("ddp-launch --help"));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  auto pet = run({launcher(), kWorker},
                 scenario_env(out, "sleep",
                              {{"PET_RDZV_BACKEND", "c10d"},
                               {"PET_RDZV_ENDPOINT", "node0:29400"},
                               {"PET_RDZV_CONF", "join_timeout=soon"}}),
                 30);
  CHECK(pet.exit_code == 2);
  CHECK_THAT(pet.output, Catch::StartsWith("ddp-launch: error: PET_RDZV_CONF join_timeout: 'soon'"));
  CHECK_FALSE(fs::exists(out.file("pid.0")));  // no worker ever started
}

TEST_CASE("a master port already in use is refused before any worker starts") {
  TempDir out;
  int port = free_port();
  // Hold the port with a listener for the duration of the check.
  Proc holder({"python3", "-c",
               "import socket,sys,time\ns=socket.socket(); s.bind(('0.0.0.0'," + std::to_string(port) +
                   ")); s.listen(); open(sys.argv[1],'w').close(); time.sleep(60)",
               out.file("listening")});
  REQUIRE(wait_until([&] { return fs::exists(out.file("listening")); }, 30));
  auto r = run({launcher(), "--nproc_per_node=1", "--master_port=" + std::to_string(port), kWorker},
               scenario_env(out, "sleep"), 30);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--master_port " + std::to_string(port) + " is already in use"));
  CHECK_FALSE(fs::exists(out.file("pid.0")));
}

TEST_CASE("a script with a CRLF #! line fails with 127, naming the interpreter and the line endings") {
  TempDir out;
  write_file(out.file("crlf.sh"), "#!/bin/sh\r\necho hi\r\n", true);
  write_file(out.file("noshebang"), "echo hi\n", true);
  auto r = run({launcher(), "--nproc_per_node=2", "--master_port=" + std::to_string(free_port()), out.file("crlf.sh")},
               scenario_env(out, "sleep"), 60);
  INFO(r.output);
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.output, Catch::Contains("cannot execute " + out.file("crlf.sh")) &&
                           Catch::Contains("the interpreter '/bin/sh\\r' does not exist; the script has Windows "
                                           "line endings"));
  auto n = run({launcher(), "--standalone", out.file("noshebang")}, scenario_env(out, "sleep"), 60);
  INFO(n.output);
  CHECK(n.exit_code == 126);
  CHECK_THAT(n.output, Catch::Contains("not a program this machine can run"));
}

TEST_CASE("standalone says which rendezvous options it ignores, in one line, and runs the job") {
  TempDir out;
  auto r = run({launcher(), "--standalone", "--master_addr=no-such-host.invalid", "--master_port=1",
                "--rdzv_endpoint=elsewhere:2", kWorker},
               scenario_env(out, "env"), 60);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: --standalone picks its own rendezvous on this machine; ignoring "
                                       "--master_addr, --master_port, --rdzv_endpoint\n"));
  CHECK(parse_env_dump(read_file(out.file("env.0")))["MASTER_ADDR"] == "127.0.0.1");
}

TEST_CASE("standalone runs on a free port, --help and --version exit 0") {
  TempDir out;
  auto r = run({launcher(), "--standalone", "--nproc_per_node=2", kWorker}, scenario_env(out, "env"), 60);
  REQUIRE(r.exit_code == 0);
  auto env = parse_env_dump(read_file(out.file("env.0")));
  CHECK(env["MASTER_PORT"] != "29500");
  CHECK(env["MASTER_PORT"] == parse_env_dump(read_file(out.file("env.1")))["MASTER_PORT"]);
  // Outside the kernel's ephemeral range: no other program's outgoing connection can take it
  // before rank 0's store binds it (ddp/common/free_port.h).
  CHECK_FALSE(ddp::ephemeral_port_range().contains(std::atoi(env["MASTER_PORT"].c_str())));
  CHECK(std::atoi(env["MASTER_PORT"].c_str()) >= 30000);
  CHECK(run({launcher(), "--help"}).exit_code == 0);
  CHECK_THAT(run({launcher(), "--version"}).output, Catch::StartsWith("ddp-launch "));
}

TEST_CASE("rdzv-endpoint localhost:0 runs a one-node job on a free port that every worker gets as MASTER_PORT") {
  // torchrun's recipe for several one-node jobs on one host; torchrun 2.11 itself hands its static
  // workers MASTER_PORT=0 there (their init_process_group then times out connecting to port 0).
  for (const std::string spelling : {"--rdzv-endpoint=localhost:0", "--rdzv_endpoint=localhost:0", "--master_port=0"}) {
    INFO(spelling);
    TempDir out;
    auto r = run({launcher(), spelling, "--nproc_per_node=2", kWorker}, scenario_env(out, "env"), 60);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    auto env0 = parse_env_dump(read_file(out.file("env.0")));
    const int port = std::atoi(env0["MASTER_PORT"].c_str());
    CHECK(port > 0);
    CHECK(port <= 65535);
    CHECK_FALSE(ddp::ephemeral_port_range().contains(port));
    CHECK(env0["MASTER_PORT"] == parse_env_dump(read_file(out.file("env.1")))["MASTER_PORT"]);
    if (spelling != "--master_port=0") CHECK(env0["MASTER_ADDR"] == "localhost");
  }
  TempDir out;
  auto pet = run({launcher(), "--nproc_per_node=1", kWorker}, scenario_env(out, "env", {{"PET_RDZV_ENDPOINT", "127.0.0.1:0"}}), 60);
  INFO(pet.output);
  REQUIRE(pet.exit_code == 0);
  CHECK(std::atoi(parse_env_dump(read_file(out.file("env.0")))["MASTER_PORT"].c_str()) > 0);
  // Two nodes could not share a port only one of them knows: refused before any worker starts.
  TempDir none;
  auto two = run({launcher(), "--rdzv-endpoint=localhost:0", "--nnodes=2", kWorker}, scenario_env(none, "env"), 60);
  CHECK(two.exit_code == 2);
  CHECK_THAT(two.output, Catch::Contains("ddp-launch: error: --rdzv-endpoint localhost:0: port 0 (a free port) works "
                                         "for a one-node job only, and this job has 2 nodes"));
  CHECK_FALSE(fs::exists(none.file("env.0")));
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

TEST_CASE("on a terminal, local rank 0 reads the launcher's stdin and the others read /dev/null") {
  TempDir out;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const std::string slave = ::ptsname(master);
  const std::string port = "--master_port=" + std::to_string(free_port());
  const std::string l = launcher();
  // The launcher as a session leader with the pty as its controlling
  // terminal: the foreground job of an interactive shell.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setsid();
    const int fd = ::open(slave.c_str(), O_RDWR);  // becomes the controlling terminal
    if (fd < 0) ::_exit(120);
    ::dup2(fd, 0), ::dup2(fd, 1), ::dup2(fd, 2);
    ::setenv("OUT", out.path().c_str(), 1);
    ::setenv("SCENARIO", "stdin", 1);
    ::execl(l.c_str(), l.c_str(), "--nproc_per_node=2", port.c_str(), kWorker.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  REQUIRE(::write(master, "hello\n", 6) == 6);
  // Drain the terminal's output so the launcher never blocks writing to it.
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  int status = 0;
  const bool exited = wait_until(
      [&] {
        char buf[512];
        while (::read(master, buf, sizeof(buf)) > 0) {
        }
        return ::waitpid(pid, &status, WNOHANG) == pid;
      },
      30);
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ::close(master);
  REQUIRE(exited);  // before: both workers stopped by SIGTTIN and the job hung
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_file(out.file("line.0")) == "hello\n");
  CHECK(read_file(out.file("line.1")) == "<eof>\n");
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

namespace {

// "0-3,8" -> {0, 1, 2, 3, 8}, as sysfs and /proc write CPU lists.
std::set<int> cpu_list(const std::string& text) {
  std::set<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.find_first_of("0123456789") == std::string::npos) continue;
    const auto dash = item.find('-');
    const int lo = std::stoi(item), hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) out.insert(c);
  }
  return out;
}

}  // namespace

TEST_CASE("numa_binding without a visible GPU: one line naming the option, exit 2, no worker started") {
  TempDir out;
  auto r = run({launcher(), "--numa-binding", "node", "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "affinity", {{"CUDA_VISIBLE_DEVICES", ""}}), 60);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: error: --numa-binding node: no NVIDIA GPU is visible"));
  CHECK_FALSE(fs::exists(out.file("pid.0")));
}

TEST_CASE("numa_binding node on a GPU machine: each worker runs on its GPU's NUMA node's CPUs") {
  // GPUs in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID below), as the driver lists them.
  std::vector<std::string> gpus;
  if (fs::exists("/proc/driver/nvidia/gpus"))
    for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus")) gpus.push_back(e.path().filename());
  if (gpus.empty()) DDP_SKIP("no NVIDIA GPU here (/proc/driver/nvidia/gpus)");
  std::sort(gpus.begin(), gpus.end());
  const int n = static_cast<int>(std::min<size_t>(gpus.size(), 2));
  TempDir out;
  auto r = run({launcher(), "--numa-binding=node", "--nproc_per_node=" + std::to_string(n),
                "--master_port=" + std::to_string(free_port()), kWorker},
               scenario_env(out, "affinity", {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}, {"CUDA_VISIBLE_DEVICES", "\x01unset"}}),
               120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  cpu_set_t mine;
  CPU_ZERO(&mine);
  sched_getaffinity(0, sizeof(mine), &mine);
  for (int lr = 0; lr < n; ++lr) {
    std::string id = gpus[static_cast<size_t>(lr)];
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
    const int node = std::max(0, std::stoi(read_file("/sys/bus/pci/devices/" + id + "/numa_node")));
    std::set<int> expect;
    for (int c : cpu_list(read_file("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist")))
      if (CPU_ISSET(c, &mine)) expect.insert(c);
    INFO("local rank " << lr << ", GPU " << id << ", NUMA node " << node);
    CHECK(cpu_list(read_file(out.file("cpus." + std::to_string(lr)))) == expect);
  }
}
