// Stack dumps through the real ddp-launch: on SIGQUIT (then torchrun's
// shutdown, exit 131), on SIGUSR2 (a live dump; the job goes on), before the
// SIGKILL of a worker that outlived --shutdown_timeout, and of Python workers
// with and without py-spy. Tiny shell or Python workers written here; every
// wait is on a condition with a deadline.
#include "scenario_util.h"
#include "stack_tools.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <fcntl.h>
#include <sys/stat.h>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <unistd.h>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

// A worker that notes its pid, then runs `body` (sh). idle() waits in the
// open of $OUT/fifo (one place, so every rank has the same stack) until
// release() opens its other end. idle_strict() also fails the worker
// (exit 5) when its open was broken off (EINTR), as a dump's attach must not do.
std::string stack_worker(const TempDir& dir, const std::string& body) {
  const std::string path = dir.file("worker.sh");
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  write_file(path,
             "#!/bin/sh\n"
             "note() { printf '%s\\n' \"$2\" > \"$OUT/$1.$RANK.tmp\" && mv \"$OUT/$1.$RANK.tmp\" \"$OUT/$1.$RANK\"; }\n"
             "idle() { read _ < \"$OUT/fifo\"; }\n"
             // read's status is 1 at the end of file, 2 when the open failed.
             "idle_strict() { read _ < \"$OUT/fifo\"; [ $? = 1 ] || exit 5; }\n"
             "note pid $$\n" +
                 body,
             true);
  return path;
}

pid_t pid_of(const TempDir& out, int rank) { return std::stoi(read_file(out.file("pid." + std::to_string(rank)))); }

// Every rank has noted it is ready; `in_kernel`: and waits in that kernel
// function (/proc/<pid>/wchan), so their stacks are the same when dumped.
bool ready(const TempDir& out, int n, const std::string& in_kernel = "") {
  for (int r = 0; r < n; ++r) {
    if (!fs::exists(out.file("ready." + std::to_string(r)))) return false;
    if (!in_kernel.empty() && read_file("/proc/" + std::to_string(pid_of(out, r)) + "/wchan") != in_kernel) return false;
  }
  return true;
}

// Lets every idle() rank go on: opening the FIFO's write end ends their
// open, closing it gives their read its end of file.
void release(const TempDir& out) {
  const int fd = ::open(out.file("fifo").c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("SIGQUIT to the launcher: every rank's stacks first, then torchrun's shutdown (exit 131)") {
  if (!has_native_tool(test_path())) DDP_SKIP("neither eu-stack nor gdb on PATH (apt-get install elfutils)");
  TempDir out;
  // The workers leave at once on the forwarded SIGQUIT: stacks that name
  // their threads were taken before it was forwarded.
  const std::string w = stack_worker(out, "trap 'note got QUIT; exit 1' QUIT\nnote ready 1\nidle\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node=2", w}, {{"OUT", out.path()}, {"TMPDIR", out.path()}});
  REQUIRE(wait_until([&] { return ready(out, 2, "wait_for_partner"); }, 30));
  p.signal(SIGQUIT);
  const auto code = p.wait(30);
  REQUIRE(code);
  const std::string o = p.output();
  INFO(o);
  CHECK(*code == 131);
  CHECK(read_file(out.file("got.0")) == "QUIT\n");
  CHECK(read_file(out.file("got.1")) == "QUIT\n");
  CHECK_THAT(o, Catch::Contains("ddp-launch: stacks of 2 ranks (SIGQUIT"));
  CHECK_THAT(o, Catch::Contains("  ranks 0,1: "));
  CHECK_THAT(o, Catch::Contains("  files: " + out.path() + "/ddp-launch-"));
  // In the run directory, kept after the launcher: one file per rank, every
  // thread of the rank that is named in it.
  for (int rank = 0; rank < 2; ++rank) {
    const auto files = stack_files(out.path(), rank);
    REQUIRE(files.size() == 1);
    CHECK_THAT(read_file(files[0]), Catch::Contains("stacks of rank " + std::to_string(rank)) &&
                                        Catch::Contains("== native frames"));
    CHECK_THAT(read_file(files[0]), Catch::Contains("TID " + std::to_string(pid_of(out, rank)) + ":") ||
                                        Catch::Contains("(LWP " + std::to_string(pid_of(out, rank)) + ")") ||
                                        Catch::Contains("(process " + std::to_string(pid_of(out, rank))));
  }
  // The failure report says it too.
  const auto report = o.find("ddp-launch: stopped by SIGQUIT");
  REQUIRE(report != std::string::npos);
  CHECK_THAT(o.substr(report), Catch::Contains("Stacks (SIGQUIT") && Catch::Contains("  ranks 0,1: "));
}

TEST_CASE("SIGUSR2 to the launcher: a live dump into the attempt's log directory, the job finishes with exit 0") {
  if (!has_native_tool(test_path())) DDP_SKIP("neither eu-stack nor gdb on PATH (apt-get install elfutils)");
  TempDir out;
  const std::string w = stack_worker(out, "trap 'note got USR2' USR2\nnote ready 1\nidle_strict\nexit 0\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node=2", "--log_dir", out.file("logs"), "--tee", "3", w},
         {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return ready(out, 2, "wait_for_partner"); }, 30));
  p.signal(SIGUSR2);
  REQUIRE(wait_until([&] { return p.output().find("  files: ") != std::string::npos; }, 30));
  const std::string dump = p.output();
  INFO(dump);
  CHECK(p.running());
  CHECK_THAT(dump, Catch::Contains("ddp-launch: stacks of 2 ranks (SIGUSR2"));
  CHECK_THAT(dump, Catch::Contains("  ranks 0,1: "));
  for (int rank = 0; rank < 2; ++rank) {
    const auto files = stack_files(out.file("logs"), rank);
    REQUIRE(files.size() == 1);
    CHECK(fs::path(files[0]).parent_path().filename() == "attempt_0");
  }
  release(out);
  const auto code = p.wait(30);
  REQUIRE(code);
  CHECK(*code == 0);
  CHECK_FALSE(fs::exists(out.file("got.0")));  // the workers never saw it
  CHECK_FALSE(fs::exists(out.file("got.1")));
}

TEST_CASE("SIGUSR2 sent over and over, from the workers' start to the launcher's end, never changes the exit code") {
  // issue 23 item 12: one that came after the last loop read the signals
  // was delivered at its default action: a successful job ended 140. (From
  // the workers' start on: before its exec, no program can catch it.)
  TempDir out;
  const std::string script =
      "\"$0\" --standalone --use_env --nproc_per_node 2 sh -c 'touch \"$OUT/up.$RANK\"; sleep 1' 2>/dev/null & L=$!; "
      "while [ ! -e \"$OUT/up.0\" ]; do sleep 0.01; done; "
      "while kill -USR2 $L 2>/dev/null; do sleep 0.01; done; wait $L; echo \"exit $?\"";
  for (int i = 0; i < 3; ++i) {
    fs::remove(out.file("up.0"));
    const auto r = run({"sh", "-c", script, launcher()}, {{"TMPDIR", out.path()}, {"OUT", out.path()}}, 60);
    INFO(r.output);
    CHECK_THAT(r.output, Catch::EndsWith("exit 0\n"));
  }
}

TEST_CASE("a live dump without --log_dir keeps the run directory for its files and says so at the end") {
  if (!has_native_tool(test_path())) DDP_SKIP("neither eu-stack nor gdb on PATH (apt-get install elfutils)");
  TempDir out;
  fs::create_directory(out.file("tmp"));
  const std::string w = stack_worker(out, "note ready 1\nidle_strict\nexit 0\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node=2", w}, {{"OUT", out.path()}, {"TMPDIR", out.file("tmp")}});
  REQUIRE(wait_until([&] { return ready(out, 2, "wait_for_partner"); }, 30));
  p.signal(SIGUSR2);
  REQUIRE(wait_until([&] { return p.output().find("  files: ") != std::string::npos; }, 30));
  release(out);
  const auto code = p.wait(30);
  const std::string o = p.output();
  INFO(o);
  REQUIRE(code);
  CHECK(*code == 0);
  // The only thing left in TMPDIR is the run directory the last line names.
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out.file("tmp"))) left.push_back(e.path());
  REQUIRE(left.size() == 1);
  CHECK_THAT(o, Catch::EndsWith("ddp-launch: the stack dumps above are kept in " + left[0] + " (remove it when done)\n"));
  CHECK(stack_files(left[0], 0).size() == 1);
}

TEST_CASE("64 ranks with no debugging tool installed: ddp-stack gives every rank its frames within the dump's bound") {
  // issue 23 item 9: with gdb alone 8 and 64 ranks gave "(no frames)" for
  // every rank, 64 gdb at once. PATH here has neither eu-stack nor gdb.
  if (::access(bin_path("ddp-stack").c_str(), X_OK) != 0)
    DDP_SKIP("ddp-stack was not built (apt-get install libdw-dev, then configure again)");
  TempDir out;
  fs::create_directory(out.file("bin"));
  fs::create_symlink("/bin/mv", out.file("bin/mv"));  // the worker's note(); printf and read are sh's own
  const std::string w = stack_worker(out, "note ready 1\nidle_strict\nexit 0\n");
  const int n = 64;
  Proc p({launcher(), "--standalone", "--nproc_per_node=" + std::to_string(n), w},
         {{"OUT", out.path()}, {"TMPDIR", out.path()}, {"PATH", out.file("bin")}});
  REQUIRE(wait_until([&] { return ready(out, n, "wait_for_partner"); }, 60));
  p.signal(SIGUSR2);
  REQUIRE(wait_until([&] { return p.output().find("  files: ") != std::string::npos; }, 60));
  const std::string dump = p.output();
  INFO(dump);
  // "ddp-launch: stacks of 64 ranks (SIGUSR2: ...) in 0.41 s:" then one group.
  const auto head = dump.find("ddp-launch: stacks of 64 ranks (SIGUSR2");
  REQUIRE(head != std::string::npos);
  const std::string line = dump.substr(head, dump.find('\n', head) - head);
  const auto took = line.rfind(") in ");
  REQUIRE(took != std::string::npos);
  CHECK(std::stod(line.substr(took + 5)) < 5.0);
  CHECK_THAT(dump, Catch::Contains("  ranks 0-63: ") || Catch::Contains("  ranks 0,1,2"));
  CHECK_THAT(dump, !Catch::Contains("(no frames)") && !Catch::Contains("not run"));
  for (int rank : {0, 31, 63}) {
    const auto files = stack_files(out.path(), rank);
    REQUIRE(files.size() == 1);
    CHECK_THAT(read_file(files[0]), Catch::Contains("== native frames: ddp-stack ") &&
                                        Catch::Contains("TID " + std::to_string(pid_of(out, rank)) + ":\n#0  0x"));
  }
  release(out);
  const auto code = p.wait(60);
  REQUIRE(code);
  CHECK(*code == 0);
}

TEST_CASE("ddp-stack: a bad or missing PID is one line naming it, exit 2, and a process that is gone, exit 1") {
  const std::string tool = bin_path("ddp-stack");
  if (::access(tool.c_str(), X_OK) != 0) DDP_SKIP("ddp-stack was not built (apt-get install libdw-dev, then configure again)");
  for (const std::string& bad : {"x", "-1", "0", "12abc", "99999999999", ""}) {
    const auto r = run({tool, bad}, {}, 30);
    INFO(bad << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output == "ddp-stack: '" + bad +
                          "' is not a process id (usage: ddp-stack PID, a process id to print the native stacks of)\n");
  }
  auto none = run({tool}, {}, 30);
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.output, Catch::StartsWith("ddp-stack: no PID given (usage: "));
  // A pid above the kernel's pid_max cannot be in use.
  const auto gone = run({tool, "1073741823"}, {}, 30);
  CHECK(gone.exit_code == 1);
  CHECK(gone.output == "ddp-stack: no process 1073741823 (it has exited, or never was)\n");
}

TEST_CASE("SIGUSR2 named in --signals_to_handle is forwarded as before, with no dump") {
  TempDir out;
  const std::string w = stack_worker(out, "trap 'note got USR2; exit 1' USR2\nnote ready 1\nidle\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node=2", "--signals_to_handle=SIGTERM,SIGUSR2", w},
         {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return ready(out, 2); }, 30));
  p.signal(SIGUSR2);
  const auto code = p.wait(30);
  REQUIRE(code);
  INFO(p.output());
  CHECK(*code == 128 + SIGUSR2);
  CHECK(read_file(out.file("got.0")) == "USR2\n");
  CHECK_THAT(p.output(), !Catch::Contains("stacks of"));
}

TEST_CASE("a worker that ignores SIGTERM has its stacks dumped before the SIGKILL") {
  if (!has_native_tool(test_path())) DDP_SKIP("neither eu-stack nor gdb on PATH (apt-get install elfutils)");
  TempDir out;
  // Rank 1 fails once rank 0 is up; rank 0 ignores the teardown's SIGTERM.
  const std::string w = stack_worker(out,
      "if [ \"$RANK\" = 1 ]; then while [ ! -e \"$OUT/ready.0\" ]; do sleep 0.01; done; exit 9; fi\n"
      "trap '' TERM\nnote ready 1\nidle\n");
  auto r = run({launcher(), "--standalone", "--nproc_per_node=2", "--shutdown_timeout=1", w},
               {{"OUT", out.path()}, {"TMPDIR", out.path()}}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 9);
  const auto dump = r.output.find("ddp-launch: stacks of 1 rank (");
  REQUIRE(dump != std::string::npos);
  CHECK_THAT(r.output.substr(dump), Catch::Contains("before SIGKILL") && Catch::Contains("  rank 0: "));
  // Dumped before the kill that ended it, and in the report.
  CHECK(dump < r.output.find("signal 9 (SIGKILL)"));
  CHECK_THAT(r.output.substr(r.output.find("worker group FAILED")), Catch::Contains("Stacks ("));
  const auto files = stack_files(out.path(), 0);
  REQUIRE(files.size() == 1);
  CHECK_THAT(read_file(files[0]), Catch::Contains("pid " + std::to_string(pid_of(out, 0))));
  CHECK(stack_files(out.path(), 1).empty());  // gone before: nothing to dump
}

namespace {

// A Python worker that waits in a function of its own until $OUT/go.
std::string python_worker(const TempDir& out) {
  const std::string path = out.file("waiter.py");
  write_file(path,
             "import os, time\n"
             "out = os.environ['OUT']\n"
             "def wait_for_go():\n"
             "    while not os.path.exists(out + '/go'):\n"
             "        time.sleep(0.05)\n"
             "rank = os.environ['RANK']\n"
             "open(out + '/pid.' + rank + '.tmp', 'w').write(str(os.getpid()))\n"
             "os.rename(out + '/pid.' + rank + '.tmp', out + '/pid.' + rank)\n"
             "open(out + '/ready.' + rank, 'w').close()\n"
             "wait_for_go()\n");
  return path;
}

}  // namespace

TEST_CASE("a Python worker's stacks show its Python frames when py-spy is on PATH") {
  const std::string spy = py_spy_dir();
  if (spy.empty()) DDP_SKIP("py-spy is not installed (pip install py-spy, or scripts/install-py-spy)");
  TempDir out;
  const std::string path = spy + ":" + test_path();
  Proc p({launcher(), "--standalone", "--nproc_per_node=2", python_worker(out)},
         {{"OUT", out.path()}, {"TMPDIR", out.path()}, {"PATH", path}});
  REQUIRE(wait_until([&] { return ready(out, 2); }, 60));
  p.signal(SIGUSR2);
  REQUIRE(wait_until([&] { return p.output().find("  files: ") != std::string::npos; }, 30));
  const std::string o = p.output();
  INFO(o);
  CHECK_THAT(o, Catch::Contains(": wait_for_go (waiter.py:") && Catch::Contains("<module> (waiter.py:10)"));
  CHECK_THAT(o, !Catch::Contains("py-spy is not on PATH"));
  write_file(out.file("go"), "");
  const auto code = p.wait(30);
  REQUIRE(code);
  CHECK(*code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    const auto files = stack_files(out.path(), rank);
    REQUIRE(files.size() == 1);
    CHECK_THAT(read_file(files[0]), Catch::Contains("== Python frames: py-spy dump --pid " +
                                                    std::to_string(pid_of(out, rank))));
  }
}

TEST_CASE("without py-spy a Python worker's dump says so in one line and still has its native frames") {
  const std::string path = "/usr/bin:/bin";
  if (!on_path(path, "py-spy").empty()) DDP_SKIP("py-spy is installed in /usr/bin or /bin");
  if (!has_native_tool(path)) DDP_SKIP("neither eu-stack nor gdb in /usr/bin (apt-get install elfutils)");
  if (::access("/usr/bin/python3", X_OK) != 0) DDP_SKIP("no /usr/bin/python3");
  TempDir out;
  Proc p({launcher(), "--standalone", "--nproc_per_node=2", python_worker(out)},
         {{"OUT", out.path()}, {"TMPDIR", out.path()}, {"PATH", path}});
  REQUIRE(wait_until([&] { return ready(out, 2); }, 60));
  p.signal(SIGUSR2);
  REQUIRE(wait_until([&] { return p.output().find("  files: ") != std::string::npos; }, 30));
  const std::string o = p.output();
  INFO(o);
  CHECK_THAT(o, Catch::Contains("  note: py-spy is not on PATH: no Python frames (pip install py-spy)\n"));
  CHECK_THAT(o, Catch::Contains("  ranks 0,1: "));
  write_file(out.file("go"), "");
  const auto code = p.wait(30);
  REQUIRE(code);
  CHECK(*code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    const auto files = stack_files(out.path(), rank);
    REQUIRE(files.size() == 1);
    CHECK_THAT(read_file(files[0]), Catch::Contains("== native frames") && !Catch::Contains("== Python frames"));
  }
}
