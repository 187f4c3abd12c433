// Black-box scenarios of the launcher under faults of its surroundings: a
// console that goes away, error files that are not files, shared-memory
// segments left by killed workers, a killed watchdog, a parent that never
// reaps. Each uses the real ddp-launch with a tiny shell worker written
// here; every wait is on a condition with a deadline.
#include "scenario_util.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

struct ProcStat {
  std::string comm;
  char state = '?';
  pid_t ppid = 0;
};

// /proc/<pid>/stat's name, state and parent; nullopt when it is gone.
std::optional<ProcStat> proc_stat(pid_t pid) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 > text.size()) return std::nullopt;
  ProcStat s;
  s.comm = text.substr(open + 1, close - open - 1);
  s.state = text[close + 2];
  s.ppid = std::atoi(text.c_str() + close + 4);
  return s;
}

// The children of `parent` named `comm`, zombies included.
std::vector<pid_t> children_named(pid_t parent, const std::string& comm, bool zombies_only = false) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    const auto s = proc_stat(pid);
    if (s && s->ppid == parent && s->comm == comm && (!zombies_only || s->state == 'Z')) out.push_back(pid);
  }
  return out;
}

std::string cmdline_of(pid_t pid) {
  std::string cmd = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(cmd.begin(), cmd.end(), '\0', ' ');
  return cmd;
}

// A worker script in `dir` running `body` (sh).
std::string worker_script(const TempDir& dir, const std::string& body) {
  const std::string path = dir.file("worker.sh");
  write_file(path, "#!/bin/sh\n" + body, true);
  return path;
}

int count_lines(const std::string& path) {
  const std::string t = read_file(path);
  return static_cast<int>(std::count(t.begin(), t.end(), '\n'));
}

std::vector<std::string> files_named(const std::string& dir, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename() == name) out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE("a console that goes away (| head) changes neither the exit code nor --summary_json") {
  TempDir out;
  // Each rank prints a line, waits until the reader has closed the pipe,
  // then writes far more than a pipe holds (a tee that stopped draining
  // would block it forever); rank 1 exits 0, rank 0 then 3. Each notes how
  // SIGPIPE is set up for it: default, like torchrun's workers.
  const std::string w = worker_script(out,
      "echo \"hello $RANK\"\n"
      "while [ ! -e \"$OUT/closed\" ]; do sleep 0.01; done\n"
      "i=0; while [ $i -lt 20000 ]; do echo \"line $i of rank $RANK\"; i=$((i+1)); done\n"
      "grep -E '^Sig(Ign|Blk)' /proc/self/status > \"$OUT/sig.$RANK.tmp\"; mv \"$OUT/sig.$RANK.tmp\" \"$OUT/sig.$RANK\"\n"
      "[ \"$RANK\" = 1 ] && exit 0\n"
      "while [ ! -e \"$OUT/sig.1\" ]; do sleep 0.01; done\n"  // rank 1 is done: no teardown cuts it short
      "exit 3\n");
  // The reader takes one line and closes its end before saying so.
  const std::string pipeline =
      "\"$0\" --standalone --nproc_per_node 2 --tee 3 --log_dir \"$OUT/logs\" --summary_json \"$OUT/s.json\" "
      "--use_env \"$1\" 2>&1 | { read -r line; exec 0<&-; : > \"$OUT/closed\"; }; echo \"${PIPESTATUS[0]}\" > \"$OUT/rc\"";
  auto r = run({"bash", "-c", pipeline, launcher(), w}, {{"OUT", out.path()}}, 60);
  INFO(r.output);
  REQUIRE_FALSE(r.timed_out);
  CHECK(read_file(out.file("rc")) == "3\n");
  const std::string summary = read_file(out.file("s.json"));
  CHECK_THAT(summary, Catch::StartsWith("{\"exit_code\": 3,"));
  // The --log_dir copies are complete although the console went away.
  const auto logs = files_named(out.file("logs"), "stdout.log");
  REQUIRE(logs.size() == 2);
  for (const std::string& log : logs) CHECK(count_lines(log) == 20001);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string sig = read_file(out.file("sig." + std::to_string(rank)));
    INFO(sig);
    // SIGPIPE (13) is bit 0x1000: neither ignored nor blocked in the worker.
    for (const std::string line : {"SigIgn:", "SigBlk:"}) {
      const auto at = sig.find(line);
      REQUIRE(at != std::string::npos);
      const unsigned long long mask = std::stoull(sig.substr(at + line.size()), nullptr, 16);
      CHECK((mask & (1ULL << (SIGPIPE - 1))) == 0);
    }
  }
}

TEST_CASE("an error file that is a FIFO ends the report at once, named as not a regular file") {
  TempDir tmp;  // the report names the file, so its run directory is kept
  auto r = run({launcher(), "--standalone", "--use_env", "sh", "-c", "mkfifo \"$TORCHELASTIC_ERROR_FILE\"; exit 1"},
               {{"TMPDIR", tmp.path()}}, 20);
  INFO(r.output);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("is not a regular file"));
}

TEST_CASE("a huge error file is reported as too large, not printed") {
  // 20 MB of a valid error file: the launcher reads at most 1 MiB of it.
  TempDir tmp;  // the report names the file, so its run directory is kept
  auto r = run({launcher(), "--standalone", "--use_env", "sh", "-c",
                "{ printf '{\"message\": \"ValueError: '; head -c 20000000 /dev/zero | tr '\\0' x; printf '\"}'; } "
                "> \"$TORCHELASTIC_ERROR_FILE\"; exit 1"},
               {{"TMPDIR", tmp.path()}}, 60);
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  INFO(r.output.substr(0, 4096));  // not all of it: that is the defect
  CHECK(r.output.size() < 64 * 1024);
  CHECK(r.output.find("20000027 bytes; the launcher reads at most 1 MiB") != std::string::npos);
}

namespace {

// A fake segment in /dev/shm named as the worker runtime names its own
// (ddp-shm-<pid of rank 0>-<random>); removed on destruction if still there.
struct FakeSegment {
  std::string path;
  explicit FakeSegment(pid_t pid) : path("/dev/shm/ddp-shm-" + std::to_string(pid) + "-test") {
    write_file(path, "x");
  }
  ~FakeSegment() { ::unlink(path.c_str()); }
};

}  // namespace

TEST_CASE("SIGKILL of the launcher: the watchdog removes its workers' shared-memory segments, only theirs") {
  if (!fs::is_directory("/dev/shm")) DDP_SKIP("no /dev/shm here");
  TempDir out;
  // A segment of another process (the test's own pid) must stay, as must
  // one of a worker's pid that is not ours (root only: chown to nobody).
  FakeSegment others(::getpid());
  const std::string w = worker_script(out,
      "printf x > /dev/shm/ddp-shm-$$-x\n"
      "if [ \"$(id -u)\" = 0 ]; then printf x > /dev/shm/ddp-shm-$$-foreign && chown 65534 /dev/shm/ddp-shm-$$-foreign; fi\n"
      "echo $$ > \"$OUT/pid.$RANK.tmp\"; mv \"$OUT/pid.$RANK.tmp\" \"$OUT/pid.$RANK\"\n"
      "while :; do sleep 30 & wait $!; done\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node=2", "--use_env", w}, {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("pid.0")) && fs::exists(out.file("pid.1")); }, 30));
  std::vector<std::string> theirs, foreign;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string pid = std::to_string(std::stoi(read_file(out.file("pid." + std::to_string(rank)))));
    theirs.push_back("/dev/shm/ddp-shm-" + pid + "-x");
    if (::geteuid() == 0) foreign.push_back("/dev/shm/ddp-shm-" + pid + "-foreign");
  }
  for (const std::string& s : theirs) REQUIRE(fs::exists(s));
  p.signal(SIGKILL);
  REQUIRE(p.wait(10));
  CHECK(wait_until([&] { return !fs::exists(theirs[0]) && !fs::exists(theirs[1]); }, 10));
  CHECK(fs::exists(others.path));
  for (const std::string& f : foreign) {
    CHECK(fs::exists(f));
    ::unlink(f.c_str());
  }
  for (const std::string& s : theirs) ::unlink(s.c_str());
}

TEST_CASE("a worker that dies before unlinking its segment: the launcher removes it at the end of the attempt") {
  if (!fs::is_directory("/dev/shm")) DDP_SKIP("no /dev/shm here");
  TempDir out;
  FakeSegment others(::getpid());
  const std::string w = worker_script(out,
      "printf x > /dev/shm/ddp-shm-$$-x\n"
      "echo $$ > \"$OUT/pid.$RANK.tmp\"; mv \"$OUT/pid.$RANK.tmp\" \"$OUT/pid.$RANK\"\n"
      "kill -KILL $$\n");
  auto r = run({launcher(), "--standalone", "--nproc_per_node=1", "--use_env", w}, {{"OUT", out.path()}}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGKILL);
  REQUIRE(fs::exists(out.file("pid.0")));
  const std::string seg = "/dev/shm/ddp-shm-" + std::to_string(std::stoi(read_file(out.file("pid.0")))) + "-x";
  CHECK_FALSE(fs::exists(seg));
  ::unlink(seg.c_str());
  CHECK(fs::exists(others.path));
}

TEST_CASE("the watchdog has a command line of its own: pkill -f ddp-launch does not match it") {
  TempDir out;
  const std::string w = worker_script(out, ": > \"$OUT/ready\"; while :; do sleep 30 & wait $!; done\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node=1", "--use_env", w}, {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("ready")); }, 30));
  // The forked watchdog names itself when it first runs, which on a loaded
  // machine may be well after the worker is up.
  std::vector<pid_t> dogs;
  std::string cmd;
  CHECK(wait_until(
      [&] {
        dogs = children_named(p.pid(), "ddp-watchdog");
        return dogs.size() == 1 && (cmd = cmdline_of(dogs[0])).rfind("ddp-watchdog", 0) == 0;
      },
      10));
  REQUIRE(dogs.size() == 1);
  INFO(cmd);
  CHECK_THAT(cmd, Catch::StartsWith("ddp-watchdog"));
  CHECK_THAT(cmd, !Catch::Contains("ddp-launch"));
  CHECK_THAT(cmdline_of(p.pid()), Catch::Contains("ddp-launch"));
  p.signal(SIGTERM);
  CHECK(p.wait(30));
}

TEST_CASE("a killed watchdog is replaced: a SIGKILL of the launcher afterwards still leaves no grandchild") {
  TempDir out;
  TempDir tmp;
  const std::string w = worker_script(out,
      "sleep 300 & echo $! > \"$OUT/gc.tmp\"; mv \"$OUT/gc.tmp\" \"$OUT/gc\"\n"
      "echo $$ > \"$OUT/pid.tmp\"; mv \"$OUT/pid.tmp\" \"$OUT/pid\"\n"
      "while :; do sleep 30 & wait $!; done\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node=1", "--use_env", w},
         {{"OUT", out.path()}, {"TMPDIR", tmp.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("gc")) && fs::exists(out.file("pid")); }, 30));
  const std::vector<pid_t> pids{std::stoi(read_file(out.file("pid"))), std::stoi(read_file(out.file("gc")))};
  std::vector<pid_t> dogs;  // named once it first runs (see above)
  CHECK(wait_until([&] { return (dogs = children_named(p.pid(), "ddp-watchdog")).size() == 1; }, 10));
  REQUIRE(dogs.size() == 1);
  ::kill(dogs[0], SIGKILL);
  REQUIRE(wait_until([&] { return p.output().find("started a new one") != std::string::npos; }, 10));
  INFO(p.output());
  CHECK_THAT(p.output(), Catch::Contains("watchdog (pid " + std::to_string(dogs[0]) + ") died of SIGKILL"));
  p.signal(SIGKILL);
  REQUIRE(p.wait(10));
  const bool gone = wait_until([&] { return !pid_alive(pids[0]) && !pid_alive(pids[1]); }, 10);
  CHECK(gone);
  if (!gone) ::kill(pids[1], SIGKILL);
  CHECK(wait_until([&] { return fs::is_empty(tmp.path()); }, 10));  // the run directory went too
}

TEST_CASE("no watchdog zombie is left under a parent that never reaps") {
  // The test becomes the subreaper of what the launcher leaves behind, and
  // waits only for the launcher (as a shell or a notebook as PID 1 would).
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  struct Unset {
    ~Unset() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } unset;
  // Two attempts: a restart must not leave one either.
  auto r = run({launcher(), "--standalone", "--nproc_per_node=2", "--max_restarts=1", "--use_env", "sh", "-c",
                "[ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ]"},
               {}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  // A watchdog that outlived the launcher is ours now: wait until it is
  // done, then count the zombies it left.
  wait_until([&] {
    for (pid_t pid : children_named(::getpid(), "ddp-watchdog"))
      if (pid_alive(pid)) return false;
    return true;
  }, 10);
  const auto zombies = children_named(::getpid(), "ddp-watchdog", true);
  CHECK(zombies.empty());
  for (pid_t z : zombies) ::waitpid(z, nullptr, 0);
}

TEST_CASE("a launcher started with SIGINT and SIGQUIT ignored (a script's background job) still stops its workers with SIGINT") {
  // issue 23 item 10: the ignored dispositions survived exec into the
  // workers, so the forwarded SIGINT did nothing and the job waited out
  // --shutdown_timeout.
  TempDir out;
  Proc p({"sh", "-c", "trap '' INT QUIT; exec \"$0\" \"$@\"", launcher(), "--standalone", "--nproc_per_node", "2",
          "--use_env", "--shutdown_timeout", "20", "sh", "-c", "touch \"$OUT/up.$RANK\"; exec sleep 30"},
         {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return fs::exists(out.file("up.0")) && fs::exists(out.file("up.1")); }, 30));
  const auto sent = std::chrono::steady_clock::now();
  p.signal(SIGINT);
  const auto code = p.wait(30);
  INFO(p.output());
  REQUIRE(code);
  CHECK(*code == 130);
  CHECK(std::chrono::steady_clock::now() - sent < std::chrono::seconds(10));  // not the 20 s grace period
  CHECK_THAT(p.output(), !Catch::Contains("SIGKILL"));
}
