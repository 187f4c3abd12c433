#include "ddp/launcher/config/command.h"
#include "ddp/launcher/config/worker_env.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::launcher;
namespace fs = std::filesystem;

namespace {
// Scripts made by the cases: a "#!/bin/sh" file with the given mode.
struct Scratch : ddp::test::ScratchDir {
  std::string make(const std::string& name, mode_t mode) { return ScratchDir::make(name, "#!/bin/sh\n", mode); }
};

LaunchOptions opts_for(std::vector<std::string> args) { return parse_launch_options(args, {}); }
}  // namespace

TEST_CASE("a .py script runs through python3 -u, --local_rank before its args") {
  Scratch s;
  std::string script = s.make("train.py", 0644);
  auto cmd = resolve_command(opts_for({script, "--epochs", "2"}), {{"PATH", "/usr/bin:/bin"}});
  CHECK(cmd.exe == "/usr/bin/python3");
  CHECK(cmd.argv_for(1) == std::vector<std::string>{"-u", script, "--local_rank=1", "--epochs", "2"});
  auto env_cmd = resolve_command(opts_for({"--use_env", script, "--epochs", "2"}), {{"PATH", "/usr/bin:/bin"}});
  CHECK(env_cmd.argv_for(1) == std::vector<std::string>{"-u", script, "--epochs", "2"});
}

TEST_CASE("PYTHON_EXEC overrides the interpreter, -m runs a module") {
  Scratch s;
  std::string py = s.make("mypython", 0755);
  auto cmd = resolve_command(opts_for({"-m", "pkg.train", "a"}), {{"PATH", "/usr/bin"}, {"PYTHON_EXEC", py}});
  CHECK(cmd.exe == py);
  CHECK(cmd.argv_for(0) == std::vector<std::string>{"-u", "-m", "pkg.train", "--local_rank=0", "a"});
  CHECK_THROWS_WITH(resolve_command(opts_for({"-m", "m"}), {{"PATH", "/nonexistent"}, {"PYTHON_EXEC", "nopython"}}),
                    Catch::Contains("'nopython' not found"));
}

TEST_CASE("executables run directly, names are looked up on PATH") {
  Scratch s;
  std::string exe = s.make("worker", 0755);
  auto direct = resolve_command(opts_for({exe, "x"}), {{"PATH", "/usr/bin"}});
  CHECK(direct.exe == exe);
  CHECK(direct.argv_for(0) == std::vector<std::string>{"--local_rank=0", "x"});
  auto onpath = resolve_command(opts_for({"worker"}), {{"PATH", "/nonexistent:" + s.dir}});
  CHECK(onpath.exe == exe);
  std::string pyexe = s.make("tool.py", 0755);
  auto nopy = resolve_command(opts_for({"--no_python", pyexe}), {{"PATH", "/usr/bin"}});
  CHECK(nopy.exe == pyexe);
}

TEST_CASE("missing or non-executable programs are usage errors") {
  Scratch s;
  std::string plain = s.make("data.bin", 0644);
  std::string py = s.make("noexec.py", 0644);
  EnvMap env{{"PATH", "/usr/bin:/bin"}};
  CHECK_THROWS_WITH(resolve_command(opts_for({plain}), env), Catch::Contains("is not executable (chmod +x it)"));
  CHECK_THROWS_WITH(resolve_command(opts_for({"--no_python", py}), env), Catch::Contains("--no_python"));
  CHECK_THROWS_WITH(resolve_command(opts_for({s.dir + "/nothing"}), env), Catch::Contains("not found: no such file"));
  CHECK_THROWS_WITH(resolve_command(opts_for({s.dir + "/nothing.py"}), env), Catch::Contains("no such script"));
  CHECK_THROWS_WITH(resolve_command(opts_for({"no-such-program-xyz"}), env), Catch::Contains("not found on PATH"));
}

TEST_CASE("a directory given as the program is named as one") {
  Scratch s;
  fs::create_directories(s.dir + "/pkg.py");
  EnvMap env{{"PATH", "/usr/bin:/bin"}};
  CHECK_THROWS_WITH(resolve_command(opts_for({s.dir}), env),
                    Catch::Equals("program '" + s.dir + "' is a directory; give the script or executable inside it"));
  CHECK_THROWS_WITH(resolve_command(opts_for({s.dir + "/pkg.py"}), env), Catch::Contains("is a directory"));
  CHECK_THROWS_WITH(resolve_command(opts_for({"--no_python", s.dir + "/"}), env), Catch::Contains("is a directory"));
}

TEST_CASE("worker environment is torchrun's set") {
  auto o = opts_for({"--nnodes=2", "--node_rank=1", "--max_restarts=3", "--role=trainer", "--master_addr=10.1.2.3",
                     "x"});
  GroupSpec g;
  g.opts = &o;
  g.nproc = 4;
  g.master_port = 1234;
  g.restart_count = 2;
  g.omp_threads = 3;
  EnvMap parent{{"HOME", "/root"}, {"CUDA_VISIBLE_DEVICES", "0,1"}, {"RANK", "stale"}};
  auto env = worker_environment(parent, g, 2, "/run/x/error.json");
  CHECK(env["RANK"] == "6");
  CHECK(env["LOCAL_RANK"] == "2");
  CHECK(env["WORLD_SIZE"] == "8");
  CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  CHECK(env["GROUP_RANK"] == "1");
  CHECK(env["GROUP_WORLD_SIZE"] == "2");
  CHECK(env["ROLE_RANK"] == "6");
  CHECK(env["ROLE_NAME"] == "trainer");
  CHECK(env["ROLE_WORLD_SIZE"] == "8");
  CHECK(env["MASTER_ADDR"] == "10.1.2.3");
  CHECK(env["MASTER_PORT"] == "1234");
  CHECK(env["TORCHELASTIC_RESTART_COUNT"] == "2");
  CHECK(env["TORCHELASTIC_MAX_RESTARTS"] == "3");
  CHECK(env["TORCHELASTIC_RUN_ID"] == "none");
  CHECK(env["TORCHELASTIC_USE_AGENT_STORE"] == "False");  // several nodes: rank 0 hosts the store
  g.agent_store = true;  // a single node's run: the launcher's (workers_store.h)
  CHECK(worker_environment(parent, g, 2, "/run/x/error.json")["TORCHELASTIC_USE_AGENT_STORE"] == "True");
  g.agent_store = false;
  CHECK(env["TORCHELASTIC_ERROR_FILE"] == "/run/x/error.json");
  CHECK(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(env["NCCL_ASYNC_ERROR_HANDLING"] == "1");  // launch mode (no --use_env): LibTorch 1.x's name too
  CHECK(env["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  CHECK(env["OMP_NUM_THREADS"] == "3");
  CHECK(env["HOME"] == "/root");
  CHECK(env["CUDA_VISIBLE_DEVICES"] == "0,1");

  parent["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0";
  g.omp_threads = 0;
  auto env2 = worker_environment(parent, g, 0, "e");
  CHECK(env2["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0");
  CHECK(env2.count("OMP_NUM_THREADS") == 0);

  // --use_env (torchrun mode) too: torchrun 1.13 gives the 1.x name, 2.x the
  // 2.x name; both, so NCCL workers of either LibTorch fail instead of hanging.
  auto u = opts_for({"--use_env", "x"});
  g.opts = &u;
  auto env3 = worker_environment({}, g, 0, "e");
  CHECK(env3["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1");
  CHECK(env3["NCCL_ASYNC_ERROR_HANDLING"] == "1");
  // A parent's value of either name is kept and given to the other name too.
  CHECK(worker_environment({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}}, g, 0, "e")["NCCL_ASYNC_ERROR_HANDLING"] == "0");
  auto old_only = worker_environment({{"NCCL_ASYNC_ERROR_HANDLING", "3"}}, g, 0, "e");
  CHECK(old_only["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3");
  CHECK(old_only["NCCL_ASYNC_ERROR_HANDLING"] == "3");
  // LOGLEVEL (torchrun's own log level) reaches the workers as torchrun's do.
  CHECK(worker_environment({{"LOGLEVEL", "INFO"}}, g, 0, "e")["LOGLEVEL"] == "INFO");
}

// A node lost whole is noticed by the keep-alive ring, not at once: a
// survivor's wait for the new generation (the runtime's 5 s without it)
// covers that, where a hot spare takes the place in the running round.
TEST_CASE("in-place recovery with hot spares: the survivors wait out the keep-alive timeout (DDP_RECOVERY_WAIT_S)") {
  GroupSpec g;
  g.nproc = 1;
  g.agent_store = true;
  auto with = [&](std::vector<std::string> args) {
    args.push_back("x");
    const auto o = opts_for(args);
    g.opts = &o;
    const auto env = worker_environment({{"DDP_RECOVERY_WAIT_S", "stale"}}, g, 0, "e");
    const auto it = env.find("DDP_RECOVERY_WAIT_S");
    return it == env.end() ? std::string("unset") : it->second;
  };
  const std::vector<std::string> c10d = {"--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "--max_restarts=1"};
  auto plus = [&](std::vector<std::string> more) {
    std::vector<std::string> a = c10d;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  // 5 s x 3 attempts, two ticks of 5 s, plus 5 s.
  CHECK(with(plus({"--hot_spares=1"})) == "30.0");
  // 0.5 s x 4, two ticks of a second at least, plus 5 s.
  CHECK(with(plus({"--hot_spares=1", "--rdzv_conf=keep_alive_interval=0.5,keep_alive_max_attempt=4"})) == "9.0");
  CHECK(with(c10d) == "unset");                                             // no spare: a lost process, seen at once
  CHECK(with(plus({"--hot_spares=1", "--recovery=restart"})) == "unset");  // no in-place recovery
  CHECK(with({"--max_restarts=1"}) == "unset");                             // one node
}

TEST_CASE("${local_rank} in the program's arguments becomes the local rank, by torchrun's Template rule") {
  EnvMap env{{"PATH", "/usr/bin:/bin"}};
  // The same arguments through torchrun 2.11 gave (local rank 1):
  // [1][1][$][a1b][${local_rank][$LOCAL_RANK][$local_rankx][1.x][${role_name}][$][$local_rank][${ local_rank}]
  const std::vector<std::string> args{"${local_rank}", "$local_rank", "$$",           "a${local_rank}b",
                                      "${local_rank",  "$LOCAL_RANK", "$local_rankx", "$local_rank.x",
                                      "${role_name}",  "$",           "$$local_rank", "${ local_rank}"};
  std::vector<std::string> argv{"--use_env", "/bin/echo"};
  argv.insert(argv.end(), args.begin(), args.end());
  CHECK(resolve_command(opts_for(argv), env).argv_for(1) ==
        std::vector<std::string>{"1", "1", "$", "a1b", "${local_rank", "$LOCAL_RANK", "$local_rankx", "1.x",
                                 "${role_name}", "$", "$local_rank", "${ local_rank}"});
  CHECK(substitute_local_rank("--gpu=${local_rank}", 7) == "--gpu=7");
  CHECK(substitute_local_rank("no macro", 7) == "no macro");
  // Launch mode: after the inserted --local_rank=N, as torchrun's macro.
  CHECK(resolve_command(opts_for({"/bin/echo", "--gpu", "${local_rank}"}), env).argv_for(2) ==
        std::vector<std::string>{"--local_rank=2", "--gpu", "2"});
}

TEST_CASE("run_path wins over --no_python and -m, as in torchrun") {
  Scratch s;
  std::string script = s.make("train.py", 0644);  // not executable: it runs through python
  auto cmd = resolve_command(opts_for({"--use_env", "--run_path", "--no_python", script, "a"}), {{"PATH", "/usr/bin:/bin"}});
  CHECK(cmd.exe == "/usr/bin/python3");
  CHECK(cmd.argv_for(0) == std::vector<std::string>{"-u", script, "a"});
  auto mod = resolve_command(opts_for({"--use_env", "--run_path", "-m", script}), {{"PATH", "/usr/bin:/bin"}});
  CHECK(mod.argv_for(0) == std::vector<std::string>{"-u", script});
}

// Found by fuzzing (tests/fuzz/fuzz_options, UBSan): the ranks were computed
// in int, so --nnodes 65536 --node_rank 65535 --nproc_per_node 65536 overflowed
// (65535 * 65536; signed overflow, in practice a negative RANK and WORLD_SIZE 0).
TEST_CASE("a job with more ranks than an int holds is a usage error") {
  LaunchOptions o = parse_launch_options({"--nnodes", "65536", "--node_rank", "65535", "x"}, {});
  CHECK_THROWS_WITH(static_placement(o, 65536), Catch::Contains("4294967296 ranks"));
  CHECK(static_placement(o, 32767).world_size == 65536 * 32767);  // 2147418112 fits
}

TEST_CASE("local rank style: --local_rank=N by default, --local-rank=N with dash, a bad style is an error") {
  EnvMap env{{"PATH", "/usr/bin:/bin"}};
  CHECK(resolve_command(opts_for({"/bin/echo", "a"}), env).argv_for(3) == std::vector<std::string>{"--local_rank=3", "a"});
  CHECK(resolve_command(opts_for({"--local-rank-style=dash", "/bin/echo", "a"}), env).argv_for(3) ==
        std::vector<std::string>{"--local-rank=3", "a"});
  CHECK(resolve_command(opts_for({"--local_rank_style", "underscore", "/bin/echo"}), env).argv_for(0) ==
        std::vector<std::string>{"--local_rank=0"});
  CHECK(resolve_command(opts_for({"--use_env", "--local_rank_style=dash", "/bin/echo"}), env).argv_for(0).empty());
  CHECK_THROWS_WITH(opts_for({"--local_rank_style=camel", "/bin/echo"}),
                    Catch::Contains("--local_rank_style=camel: not a local rank style; use underscore"));
}

TEST_CASE("OMP_NUM_THREADS default splits the cores, never below 1") {
  CHECK(default_omp_threads({}, 8, 2) == 4);
  CHECK(default_omp_threads({}, 2, 4) == 1);
  CHECK(default_omp_threads({}, 7, 2) == 3);
  CHECK_FALSE(default_omp_threads({{"OMP_NUM_THREADS", "5"}}, 8, 2).has_value());
  CHECK(default_omp_threads({{"OMP_NUM_THREADS", ""}}, 8, 2) == 4);  // empty is unset, as OpenMP reads it
}

TEST_CASE("signals_to_handle: workers see the launcher's list in TORCHELASTIC_SIGNALS_TO_HANDLE") {
  GroupSpec g;
  auto d = opts_for({"x"});
  g.opts = &d;
  // torchrun 2.x sets its own list whatever the parent had.
  CHECK(worker_environment({{"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM"}}, g, 0, "e")["TORCHELASTIC_SIGNALS_TO_HANDLE"] ==
        "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  auto o = opts_for({"--signals-to-handle", "SIGTERM, SIGINT,SIGUSR1 ,SIGUSR2", "x"});
  g.opts = &o;
  CHECK(worker_environment({}, g, 0, "e")["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGUSR1,SIGUSR2");
}

TEST_CASE("virtual_local_rank: LOCAL_RANK 0 and only the worker's own GPU visible, as torchrun 2.x") {
  auto o = opts_for({"--virtual-local-rank", "--nnodes=2", "--node_rank=1", "x"});
  GroupSpec g;
  g.opts = &o;
  g.nproc = 4;
  // No CUDA_VISIBLE_DEVICES in the parent: local rank N sees GPU N.
  for (int lr = 0; lr < 4; ++lr) {
    auto env = worker_environment({}, g, lr, "e");
    CHECK(env["LOCAL_RANK"] == "0");
    CHECK(env["CUDA_VISIBLE_DEVICES"] == std::to_string(lr));
    CHECK(env["RANK"] == std::to_string(4 + lr));  // ranks are unchanged
    CHECK(env["LOCAL_WORLD_SIZE"] == "4");
  }
  // The parent's list: local rank N gets its Nth entry, blanks stripped (UUIDs too).
  EnvMap parent{{"CUDA_VISIBLE_DEVICES", "3, 5,GPU-8f1e,7"}};
  CHECK(worker_environment(parent, g, 0, "e")["CUDA_VISIBLE_DEVICES"] == "3");
  CHECK(worker_environment(parent, g, 1, "e")["CUDA_VISIBLE_DEVICES"] == "5");
  CHECK(worker_environment(parent, g, 2, "e")["CUDA_VISIBLE_DEVICES"] == "GPU-8f1e");
  // A list shorter than the workers: one line before any worker starts (main checks nproc - 1).
  CHECK_THROWS_WITH(virtual_visible_device({{"CUDA_VISIBLE_DEVICES", "0,1"}}, 2, 4),
                    Catch::StartsWith("--virtual_local_rank: local rank 2 has no GPU in CUDA_VISIBLE_DEVICES=0,1 (2 "
                                      "listed); give --nproc_per_node 2 or less, or list 4 GPUs"));
  CHECK_THROWS_AS(virtual_visible_device({{"CUDA_VISIBLE_DEVICES", "0,1"}}, 2, 4), UsageError);
  // Without the option nothing changes.
  auto plain = opts_for({"x"});
  g.opts = &plain;
  auto env = worker_environment(parent, g, 2, "e");
  CHECK(env["LOCAL_RANK"] == "2");
  CHECK(env["CUDA_VISIBLE_DEVICES"] == "3, 5,GPU-8f1e,7");
}

TEST_CASE("virtual_local_rank in launch mode: --local_rank=0, matching LOCAL_RANK") {
  EnvMap env{{"PATH", "/usr/bin:/bin"}};
  CHECK(resolve_command(opts_for({"--virtual_local_rank", "/bin/echo", "a"}), env).argv_for(3) ==
        std::vector<std::string>{"--local_rank=0", "a"});
  CHECK(resolve_command(opts_for({"--virtual_local_rank", "--local_rank_style=dash", "/bin/echo"}), env).argv_for(2) ==
        std::vector<std::string>{"--local-rank=0"});
}

// Issue 51 item 5: under python -S or -I the sitecustomize never runs, and
// --python_heartbeat did nothing, silently.
TEST_CASE("python -S, -I or -E (argv or #! line) is found: the heartbeat's sitecustomize would not run") {
  auto skipped = [](std::string exe, std::vector<std::string> args) {
    WorkerCommand c;
    c.exe = std::move(exe);
    c.args = std::move(args);
    return python_site_skipped_by(c);
  };
  CHECK(skipped("/usr/bin/python3", {"-S", "train.py"}) == "-S");
  CHECK(skipped("/usr/bin/python3.11", {"-u", "-I", "train.py"}) == "-I");
  CHECK(skipped("python3", {"-uE", "-m", "pkg"}) == "-E");
  CHECK(skipped("python3", {"-Wignore", "-X", "dev", "-I", "t.py"}) == "-I");
  CHECK(skipped("/usr/bin/python3", {"-u", "train.py", "-S"}).empty());  // the script's own argument
  CHECK(skipped("/usr/bin/python3", {"-m", "pkg", "-I"}).empty());
  CHECK(skipped("/usr/bin/python3", {"-c", "import x", "-S"}).empty());
  CHECK(skipped("/usr/bin/python3", {"-u", "train.py"}).empty());
  CHECK(skipped("/opt/worker", {"-S"}).empty());  // not a python
  Scratch s;
  CHECK(skipped(s.ScratchDir::make("a.py", "#!/usr/bin/python3 -I\nprint(1)\n", 0755), {}) == "-I");
  CHECK(skipped(s.ScratchDir::make("b.py", "#!/usr/bin/env -S python3 -S -u\n", 0755), {}) == "-S");
  CHECK(skipped(s.ScratchDir::make("c.py", "#!/usr/bin/env python3\n", 0755), {}).empty());
  CHECK(skipped(s.ScratchDir::make("d.sh", "#!/bin/sh -e\n", 0755), {}).empty());
  CHECK_THAT(python_heartbeat_skipped_line("-S"),
             Catch::StartsWith("ddp-launch: warning: --python_heartbeat: the workers' python runs with -S, which skips "
                               "the sitecustomize that enables the heartbeat") &&
                 Catch::EndsWith("drop -S, or enable it in the script: import ddp_launch.heartbeat; "
                                 "ddp_launch.heartbeat.enable()"));
  CHECK_THAT(python_heartbeat_skipped_line("-I"), Catch::EndsWith("drop -I"));
}
