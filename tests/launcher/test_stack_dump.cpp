// Stack dumps (stack_dump.h): signatures out of real eu-stack, gdb and py-spy
// output captured from ddp-train and a Python process (fixtures/stacks), the
// grouped summary, and the real tools against a child of the test.
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/diagnose/stack_dump.h"
#include "scratch_dir.h"
#include "test_skip.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace ddp::launcher;
using ddp::test::ScratchDir;

namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(DDP_STACK_FIXTURES) + "/" + name);
  std::stringstream s;
  s << in.rdbuf();
  REQUIRE_FALSE(s.str().empty());
  return s.str();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

StackTools path_tools() {
  const char* p = std::getenv("PATH");
  return find_stack_tools(p ? p : "");
}

// py-spy on PATH, else where scripts/install-py-spy puts it; "" when neither.
std::string py_spy() {
  const std::string on_path = path_tools().py_spy;
  if (!on_path.empty()) return on_path;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string cache = xdg && *xdg ? xdg : std::string(home ? home : "") + "/.cache";
  const std::string p = cache + "/ddp-launch/py-spy/venv/bin/py-spy";
  return ::access(p.c_str(), X_OK) == 0 ? p : "";
}

// A child the test owns, killed and reaped at the end of the case.
struct Child {
  pid_t pid = -1;
  explicit Child(const std::vector<std::string>& argv) {
    pid = ::fork();
    if (pid == 0) {
      std::vector<char*> a;
      for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      ::execvp(a[0], a.data());
      ::_exit(127);
    }
  }
  ~Child() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  // /proc/<pid>/stat's state letter ('S', 'T' stopped, ...).
  char state() const {
    const std::string s = slurp("/proc/" + std::to_string(pid) + "/stat");
    const auto close = s.rfind(')');
    return close == std::string::npos || close + 2 >= s.size() ? '?' : s[close + 2];
  }
  // Waits (bounded) until it sleeps again (a process just detached or
  // continued runs for a moment): false when it stays stopped ('T', 't').
  bool sleeps_again() const {
    for (int i = 0; i < 500; ++i) {
      if (state() == 'S') return true;
      ::usleep(10 * 1000);
    }
    return false;
  }
  // Waits (bounded) until the child has exec'd `exe_part` and sleeps.
  bool settled(const std::string& exe_part) const {
    for (int i = 0; i < 500; ++i) {
      char buf[512] = {};
      const ssize_t n = ::readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof(buf) - 1);
      if (n > 0 && std::string(buf).find(exe_part) != std::string::npos && state() == 'S') return true;
      ::usleep(10 * 1000);
    }
    return false;
  }
};

}  // namespace

TEST_CASE("native signature: eu-stack of a ddp-train rank waiting in DDP's allreduce") {
  const std::string out = fixture("eu-stack.ddp-train.pid4553.txt");
  CHECK(native_signature(out, 4553) == "pthread_cond_wait <- LocalWork::wait <- AsyncWork::wait <- Reducer::decide");
  // Another thread by its tid; a pid that is not in the dump gives nothing.
  CHECK(native_signature(out, 4564) == "pthread_cond_wait <- ShmAllreduce::run");
  CHECK(native_signature(out, 1).empty());
}

TEST_CASE("native signature: gdb of a ddp-train rank in an allreduce, arguments and libc internals left out") {
  const std::string out = fixture("gdb.ddp-train.pid4553.txt");
  CHECK(native_signature(out, 4553) == "pthread_cond_wait <- Work::wait <- AsyncWork::wait <- ProcessGroup::allreduce");
  CHECK(native_signature(out, 4564) == "pthread_cond_wait <- ShmAllreduce::run");
}

TEST_CASE("native signature: templates, anonymous namespaces, symbol versions and unnamed frames") {
  const std::string gdb =
      "Thread 1 (Thread 0x7f (LWP 7) \"x\"):\n"
      "#0  0x00007f39528ed545 in ?? ()\n"
      "#1  0x000055 in std::vector<int, std::allocator<int> >::push_back(int const&) () from /lib/x.so\n"
      "#2  0x000056 in ddp::(anonymous namespace)::Loader::read_idx (this=0x1, path=...) at idx_file.cpp:88\n"
      "#3  0x000057 in bool std::operator< <char>(std::string const&, std::string const&) ()\n"
      "#4  0x000058 in main ()\n";
  CHECK(native_signature(gdb, 7) == "vector::push_back <- Loader::read_idx <- std::operator< <- main");
  const std::string eu = "PID 7 - process\nTID 7:\n#0  0x1 __GI___poll\n#1  0x2\n#2  0x3 clock_nanosleep@GLIBC_2.2.5\n";
  CHECK(native_signature(eu, 7) == "poll <- clock_nanosleep");
  // The main thread in oneDNN's JIT code (seen with 8 ddp-train ranks): one frame, no name.
  const std::string jit = "PID 9 - process\nTID 9:\n#0  0x00007f3beeeff820\nTID 10:\n#0  0x00007f3c0e63a26f __poll\n";
  CHECK(native_signature(jit, 9) == kNoSymbols);
  CHECK(native_signature(jit, 10) == "poll");
}

TEST_CASE("python signature: py-spy's main thread, innermost first, file names without their directory") {
  const std::string out = fixture("py-spy.sleep.pid5033.txt");
  CHECK(python_signature(out, 5033) == "inner (sl.py:3) <- outer (sl.py:5) <- <module> (sl.py:7)");
  // Not found by id (py-spy may print a pthread id): the thread named MainThread.
  CHECK(python_signature(out, 1) == "inner (sl.py:3) <- outer (sl.py:5) <- <module> (sl.py:7)");
  CHECK(python_signature(out, 5077) == "<lambda> (sl.py:6) <- Thread.run (threading.py:982) <- "
                                       "Thread._bootstrap_inner (threading.py:1045) <- "
                                       "Thread._bootstrap (threading.py:1002)");
  // The interpreter's own frames, as eu-stack sees the same process.
  CHECK(native_signature(fixture("eu-stack.python.pid5033.txt"), 5033) ==
        "clock_nanosleep <- time_sleep <- cfunction_vectorcall_O <- PyObject_Vectorcall");
}

TEST_CASE("stack summary: ranks grouped by signature, the odd one last, notes once, the files as a pattern") {
  auto rs = [](int rank, const std::string& sig, const std::string& note = "") {
    RankStacks r;
    r.rank = rank;
    r.signature = sig;
    r.note = note;
    r.file = "/tmp/d/stacks.sigquit.1.rank_" + std::to_string(rank) + ".txt";
    return r;
  };
  const std::string py = "py-spy is not on PATH: no Python frames (pip install py-spy)";
  const std::vector<RankStacks> s{rs(0, "allreduce <- Reducer::finish <- backward", py),
                                  rs(1, "nanosleep <- main", py + "\neu-stack failed (exit 1): gone"),
                                  rs(2, "allreduce <- Reducer::finish <- backward", py),
                                  rs(3, "allreduce <- Reducer::finish <- backward", py)};
  CHECK(format_stack_summary(s) ==
        "  ranks 0,2,3: allreduce <- Reducer::finish <- backward\n"
        "  rank 1: nanosleep <- main\n"
        "  note: py-spy is not on PATH: no Python frames (pip install py-spy)\n"
        "  note (rank 1): eu-stack failed (exit 1): gone\n"
        "  files: /tmp/d/stacks.sigquit.1.rank_*.txt\n");
  // Runs of ranks become ranges; a rank without frames says so; files that
  // differ in more than the rank are listed one by one.
  std::vector<RankStacks> many;
  for (int r = 0; r < 8; ++r) many.push_back(rs(r, r == 5 ? "" : "x"));
  many[7].file = "/elsewhere/f.txt";
  CHECK(format_stack_summary(many) ==
        "  ranks 0-4,6,7: x\n"
        "  rank 5: (no frames)\n"
        "  file (rank 0): /tmp/d/stacks.sigquit.1.rank_0.txt\n"
        "  file (rank 1): /tmp/d/stacks.sigquit.1.rank_1.txt\n"
        "  file (rank 2): /tmp/d/stacks.sigquit.1.rank_2.txt\n"
        "  file (rank 3): /tmp/d/stacks.sigquit.1.rank_3.txt\n"
        "  file (rank 4): /tmp/d/stacks.sigquit.1.rank_4.txt\n"
        "  file (rank 5): /tmp/d/stacks.sigquit.1.rank_5.txt\n"
        "  file (rank 6): /tmp/d/stacks.sigquit.1.rank_6.txt\n"
        "  file (rank 7): /elsewhere/f.txt\n");
  CHECK(format_stack_summary({}).empty());
}

TEST_CASE("dump_stacks with the real native tool: every thread in the rank's file, the process keeps running") {
  const StackTools tools = path_tools();
  if (tools.eu_stack.empty() && tools.gdb.empty()) DDP_SKIP("neither eu-stack nor gdb on PATH (apt-get install elfutils)");
  ScratchDir d;
  Child sleeper({"sleep", "30"});
  REQUIRE(sleeper.settled("sleep"));
  const auto r = dump_stacks({{3, 1, sleeper.pid, false}}, d.dir, "test.1", 10, tools);
  REQUIRE(r.size() == 1);
  CHECK(r[0].rank == 3);
  CHECK(r[0].local_rank == 1);
  CHECK(r[0].pid == sleeper.pid);
  CHECK(r[0].file == d.dir + "/stacks.test.1.rank_3.txt");
  INFO(slurp(r[0].file));
  CHECK_THAT(r[0].signature, Catch::Contains("nanosleep"));
  if (!tools.eu_stack.empty()) {
    CHECK(r[0].note.empty());
    CHECK_THAT(slurp(r[0].file), Catch::Contains("TID " + std::to_string(sleeper.pid) + ":"));
  }
  CHECK_THAT(slurp(r[0].file), Catch::StartsWith("# ddp-launch: stacks of rank 3 (local_rank 1, pid " +
                                                 std::to_string(sleeper.pid) + "), test.1, "));
  CHECK(sleeper.sleeps_again());  // detached: neither stopped nor killed
  CHECK_FALSE(is_python_process(sleeper.pid));
}

TEST_CASE("ddp-stack, libdw in a program of ours, is found beside the executable and unwinds as eu-stack does") {
  // The test binaries live beside ddp-launch and ddp-stack (build/bin).
  const StackTools tools = path_tools();
  if (tools.ddp_stack.empty()) DDP_SKIP("ddp-stack was not built (apt-get install libdw-dev, then configure again)");
  ScratchDir d;
  Child sleeper({"sleep", "30"});
  REQUIRE(sleeper.settled("sleep"));
  // Only ddp-stack: no debugging tool installed is needed.
  const auto r = dump_stacks({{2, 0, sleeper.pid, false}}, d.dir, "own", 10, StackTools{"", "", "", tools.ddp_stack});
  REQUIRE(r.size() == 1);
  const std::string file = slurp(r[0].file);
  INFO(file);
  CHECK(r[0].note.empty());
  CHECK_THAT(file, Catch::Contains("== native frames: ddp-stack " + std::to_string(sleeper.pid) + " ==\nPID " +
                                   std::to_string(sleeper.pid) + " - process\nTID " + std::to_string(sleeper.pid) +
                                   ":\n#0  0x"));
  CHECK_THAT(r[0].signature, Catch::Contains("nanosleep"));
  CHECK(sleeper.sleeps_again());
  if (!tools.eu_stack.empty()) {
    // The same frames, names and order, as eu-stack's own dump of the process.
    const auto e = dump_stacks({{2, 0, sleeper.pid, false}}, d.dir, "eu", 10, StackTools{"", tools.eu_stack, ""});
    REQUIRE(e.size() == 1);
    CHECK(e[0].signature == r[0].signature);
  }
}

TEST_CASE("eu-stack runs only when ddp-stack found no frame") {
  ScratchDir d;
  const std::string log = d.dir + "/ran";
  // Stand-ins: a ddp-stack that prints frames or fails, an eu-stack that notes it ran.
  const std::string good = d.make("good-ddp-stack", "#!/bin/sh\nprintf 'PID %s - process\\nTID %s:\\n#0  0x1 own_frame\\n' \"$1\" \"$1\"\n", 0755);
  const std::string bad = d.make("bad-ddp-stack", "#!/bin/sh\necho 'ddp-stack: cannot attach to '$1': Operation not permitted' >&2\nexit 1\n", 0755);
  const std::string eu = d.make("eu-stack", "#!/bin/sh\necho eu >> " + log + "\nprintf 'PID %s - process\\nTID %s:\\n#0  0x2 eu_frame\\n' \"$2\" \"$2\"\n", 0755);
  Child sleeper({"sleep", "30"});
  auto with_good = dump_stacks({{0, 0, sleeper.pid, false}}, d.dir, "good", 10, StackTools{"", eu, "", good});
  CHECK(with_good[0].signature == "own_frame");
  CHECK(with_good[0].note.empty());
  CHECK_FALSE(::access(log.c_str(), F_OK) == 0);
  auto with_bad = dump_stacks({{0, 0, sleeper.pid, false}}, d.dir, "bad", 10, StackTools{"", eu, "", bad});
  CHECK(with_bad[0].signature == "eu_frame");
  CHECK(with_bad[0].note == "bad-ddp-stack failed (exit 1): ddp-stack: cannot attach to " + std::to_string(sleeper.pid) +
                                ": Operation not permitted (ptrace is refused: see kernel.yama.ptrace_scope, or "
                                "CAP_SYS_PTRACE in a container)");
  CHECK(slurp(log) == "eu\n");
}

TEST_CASE("dump_stacks runs at most max_running tools at once, every rank dumped within the bound") {
  ScratchDir d;
  const std::string log = d.dir + "/log";
  // A stand-in ddp-stack that takes 50 ms and notes its start and end (one
  // write each: O_APPEND keeps the lines whole).
  const std::string tool = d.make("ddp-stack",
                                  "#!/bin/sh\necho start >> " + log + "\nsleep 0.05\n"
                                  "printf 'PID %s - process\\nTID %s:\\n#0  0x1 waiting_%s\\n' \"$1\" \"$1\" \"$1\"\n"
                                  "echo end >> " + log + "\n",
                                  0755);
  std::vector<std::unique_ptr<Child>> ranks;
  std::vector<StackTarget> targets;
  for (int r = 0; r < 24; ++r) {
    ranks.push_back(std::make_unique<Child>(std::vector<std::string>{"sleep", "30"}));
    targets.push_back({r, r, ranks.back()->pid, false});
  }
  const auto r = dump_stacks(targets, d.dir, "bounded", 30, StackTools{"", "", "", tool}, 3);
  REQUIRE(r.size() == 24);
  for (int i = 0; i < 24; ++i) CHECK(r[i].signature == "waiting_" + std::to_string(ranks[i]->pid));
  std::istringstream in(slurp(log));
  int running = 0, most = 0, started = 0;
  for (std::string line; std::getline(in, line);) {
    if (line == "start") ++started, most = std::max(most, ++running);
    if (line == "end") --running;
  }
  CHECK(started == 24);
  CHECK(most <= 3);
  CHECK(most >= 2);  // and side by side, not one by one
  CHECK(default_stack_tools_running() >= 2);
  CHECK(default_stack_tools_running() <= 16);
}

TEST_CASE("dump_stacks falls back to gdb, saying neither ddp-stack nor eu-stack is here") {
  const StackTools found = path_tools();
  if (found.gdb.empty()) DDP_SKIP("gdb is not on PATH");
  ScratchDir d;
  Child sleeper({"sleep", "30"});
  REQUIRE(sleeper.settled("sleep"));
  const auto r = dump_stacks({{0, 0, sleeper.pid, false}}, d.dir, "t", 20, StackTools{"", "", found.gdb});
  REQUIRE(r.size() == 1);
  INFO(slurp(r[0].file));
  CHECK(r[0].note == "neither ddp-stack (built with libdw-dev) nor eu-stack (apt-get install elfutils) is here: "
                     "native frames by gdb, which is slower");
  CHECK_THAT(r[0].signature, Catch::Contains("nanosleep"));
  CHECK(sleeper.sleeps_again());
}

TEST_CASE("dump_stacks without any tool: one line per missing tool, the file still names the rank") {
  ScratchDir d;
  Child sleeper({"sleep", "30"});
  const auto r = dump_stacks({{1, 1, sleeper.pid, true}}, d.dir, "none", 5, StackTools{});
  REQUIRE(r.size() == 1);
  CHECK(r[0].signature.empty());
  CHECK(r[0].note ==
        "py-spy is not on PATH: no Python frames (pip install py-spy)\n"
        "no ddp-stack (built with libdw-dev), eu-stack or gdb here: no native frames (apt-get install elfutils)");
  CHECK_THAT(slurp(r[0].file), Catch::Contains("stacks of rank 1") && Catch::Contains("== notes =="));
  CHECK_THAT(format_stack_summary(r), Catch::Contains("rank 1: (no frames)"));
}

TEST_CASE("dump_stacks kills a tool that overruns the timeout and leaves the rank running") {
  ScratchDir d;
  // A stand-in for a hung eu-stack: it stops the target as a tracer's attach
  // would, then never returns.
  const std::string hung = d.make("eu-stack", "#!/bin/sh\nkill -STOP \"$2\"\nexec sleep 60\n", 0755);
  Child sleeper({"sleep", "30"});
  REQUIRE(sleeper.settled("sleep"));
  const auto start = std::chrono::steady_clock::now();
  const auto r = dump_stacks({{0, 0, sleeper.pid, false}, {1, 1, sleeper.pid, false}}, d.dir, "slow", 0.5,
                             StackTools{"", hung, ""});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  REQUIRE(r.size() == 2);
  CHECK(took < 5);  // bounded by the timeout (with room for a loaded machine), not by the tool
  CHECK(r[0].note == "eu-stack did not finish within 0.5 s: killed (the rank was sent SIGCONT)");
  CHECK(r[1].note == r[0].note);
  CHECK(sleeper.sleeps_again());  // continued, not left stopped
}

TEST_CASE("dump_stacks of a Python process: py-spy's Python frames and the native ones in one file") {
  const std::string spy = py_spy();
  if (spy.empty()) DDP_SKIP("py-spy is not installed (pip install py-spy, or scripts/install-py-spy)");
  ScratchDir d;
  const std::string script = d.make("stuck.py", "import time\ndef stuck_here():\n    time.sleep(60)\nstuck_here()\n", 0644);
  Child py({"python3", script});
  REQUIRE(py.settled("python"));
  REQUIRE(is_python_process(py.pid));
  StackTools tools = path_tools();
  tools.py_spy = spy;
  const auto r = dump_stacks({{0, 0, py.pid, true}}, d.dir, "py", 10, tools);
  REQUIRE(r.size() == 1);
  const std::string file = slurp(r[0].file);
  INFO(file);
  CHECK(r[0].signature == "stuck_here (stuck.py:3) <- <module> (stuck.py:4)");
  CHECK_THAT(file, Catch::Contains("== Python frames: py-spy dump --pid " + std::to_string(py.pid)));
  CHECK_THAT(file, Catch::Contains("\"MainThread\""));
  if (!tools.eu_stack.empty()) CHECK_THAT(file, Catch::Contains("time_sleep"));
  CHECK(py.sleeps_again());
}

TEST_CASE("the failure report ends with the attempt's last stack dump") {
  AttemptResult a;
  a.launcher_signal = SIGQUIT;
  CHECK_THAT(format_failure_report({a}, "h", 0), !Catch::Contains("Stacks ("));
  a.stacks = "Stacks (SIGQUIT: before forwarding it; 2 ranks, 0.05 s):\n  ranks 0,1: open\n  files: /d/s.rank_*.txt\n";
  const std::string report = format_failure_report({a}, "h", 0);
  CHECK_THAT(report, Catch::Contains("stopped by SIGQUIT") &&
                         Catch::EndsWith(a.stacks + std::string(72, '=') + "\n"));
}
