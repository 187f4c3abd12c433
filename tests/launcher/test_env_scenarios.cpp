// Black-box scenarios: what the workers get from the real ddp-launch
// (torchrun's environment, the private run directory, python scripts and
// modules, PET_ variables, stdin on a terminal).
#include <catch2/catch.hpp>

#include "scenario_processes.h"
#include "scenario_util.h"
#include "test_support.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <sched.h>
#include <set>
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
    CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "True");  // one node: the launcher hosts the store
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
