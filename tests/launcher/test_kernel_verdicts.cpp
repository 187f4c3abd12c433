// Black-box scenarios of workers the kernel decides about: one that SIGKILL
// cannot end (frozen by a v1 freezer cgroup: D state, as on a hung NFS
// mount) and one the OOM killer ends (a v1 memory cgroup with a 64 MiB
// limit). Each skips where the machine cannot make the case; every cgroup
// made here is removed in every path (cgroup_v1.h).
#include "cgroup_v1.h"
#include "scenario_util.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <optional>
#include <unistd.h>

using namespace ddp::test;

namespace {

std::string worker_script(const TempDir& dir, const std::string& body) {
  const std::string path = dir.file("worker.sh");
  write_file(path, "#!/bin/sh\n" + body, true);
  return path;
}

char proc_state(pid_t pid) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
}

pid_t read_pid(const std::string& path) {
  const std::string t = read_file(path);
  return t.empty() ? 0 : static_cast<pid_t>(std::stol(t));
}

}  // namespace

TEST_CASE("a worker SIGKILL cannot end (D state) is named with its state and wait channel, and the launcher ends without it (no restart)") {
  FreezerCgroup freezer;  // declared first: thawed (and the worker gone) after the launcher is
  if (!freezer.ok()) DDP_SKIP(std::string("cannot make a freezer cgroup under ") + FreezerCgroup::kRoot);
  TempDir out;
  // Rank 1 becomes a plain sleep (its pid stays the worker's) that the test
  // freezes; rank 0 fails once rank 1 is frozen.
  const std::string w = worker_script(out,
      "echo $$ > \"$OUT/pid.$RANK.tmp\"; mv \"$OUT/pid.$RANK.tmp\" \"$OUT/pid.$RANK\"\n"
      "[ \"$RANK\" = 1 ] && exec sleep 300\n"
      "while [ ! -e \"$OUT/go\" ]; do sleep 0.01; done\n"
      "exit 5\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node", "2", "--shutdown_timeout", "1", "--max_restarts", "1",
          "--summary_json", out.file("s.json"), w},
         {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return read_pid(out.file("pid.1")) > 0; }, 20));
  const pid_t rank1 = read_pid(out.file("pid.1"));
  REQUIRE(wait_until([&] { return proc_state(rank1) == 'S'; }, 10));  // the exec'd sleep
  REQUIRE(freezer.add(rank1));
  REQUIRE(freezer.freeze());
  REQUIRE(wait_until([&] { return proc_state(rank1) == 'D'; }, 10));
  write_file(out.file("go"), "");
  // SIGTERM, 1 s of grace, SIGKILL, a few seconds for it to take: then the
  // launcher goes on without rank 1 (before: it waited for it forever).
  const auto code = p.wait(1 + 5 + 6);
  INFO(p.output());
  REQUIRE(code.has_value());
  CHECK(*code == 5);  // the root cause's code, rank 0's
  const std::string o = p.output();
  CHECK_THAT(o, Catch::Contains("rank 1 (pid " + std::to_string(rank1) + ") is in uninterruptible sleep (D, wchan "));
  CHECK_THAT(o, Catch::Contains("and cannot be killed"));
  // In the failure report too, with why there is no restart.
  const auto report = o.find("worker group FAILED");
  REQUIRE(report != std::string::npos);
  CHECK_THAT(o.substr(report), Catch::Contains("rank 1 (pid " + std::to_string(rank1) + ") is in uninterruptible sleep"));
  CHECK_THAT(o.substr(report), Catch::Contains("not restarted"));
  CHECK_THAT(o, !Catch::Contains("restarting the group"));
  CHECK_THAT(o, Catch::Contains(std::to_string(rank1) + " not killed"));  // its row of the run summary
  CHECK_THAT(read_file(out.file("s.json")),
             Catch::Contains("\"not_killed\": [{\"rank\": 1, \"pid\": " + std::to_string(rank1) + ", \"worker\": true, \"state\": \"D\""));
  CHECK(proc_state(rank1) == 'D');  // still there: nothing waited for it
  freezer.thaw();
  CHECK(wait_until([&] { return !pid_alive(rank1); }, 10));  // the pending SIGKILL ends it
}

TEST_CASE("a process of a worker's group that SIGKILL cannot end is named as that rank's, and the launcher ends") {
  FreezerCgroup freezer;
  if (!freezer.ok()) DDP_SKIP(std::string("cannot make a freezer cgroup under ") + FreezerCgroup::kRoot);
  TempDir out;
  // Rank 1 starts a child in its group (a DataLoader worker, say) and waits;
  // rank 0 fails once that child is frozen. Rank 1 itself dies of SIGTERM.
  const std::string w = worker_script(out,
      "if [ \"$RANK\" = 1 ]; then\n"
      "  sleep 300 & echo $! > \"$OUT/child.tmp\"; mv \"$OUT/child.tmp\" \"$OUT/child\"\n"
      "  exec sleep 300\n"
      "fi\n"
      "while [ ! -e \"$OUT/go\" ]; do sleep 0.01; done\n"
      "exit 5\n");
  Proc p({launcher(), "--standalone", "--nproc_per_node", "2", "--shutdown_timeout", "1", w}, {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return read_pid(out.file("child")) > 0; }, 20));
  const pid_t child = read_pid(out.file("child"));
  REQUIRE(freezer.add(child));
  REQUIRE(freezer.freeze());
  REQUIRE(wait_until([&] { return proc_state(child) == 'D'; }, 10));
  write_file(out.file("go"), "");
  const auto code = p.wait(1 + 1 + 5 + 6);  // the worker's grace, the leftover's grace, the wait after SIGKILL
  INFO(p.output());
  REQUIRE(code.has_value());
  CHECK(*code == 5);
  CHECK_THAT(p.output(), Catch::Contains("rank 1's process " + std::to_string(child) +
                                         " (sleep, in its group) is in uninterruptible sleep (D"));
  freezer.thaw();
  CHECK(wait_until([&] { return !pid_alive(child); }, 10));
}

namespace {

// A child of this process's v1 memory cgroup limited to 64 MiB (swap too,
// where the kernel accounts it), or a reason why there cannot be one.
struct SmallMemoryCgroup {
  std::optional<ChildCgroup> cg;
  std::string why_not;
  SmallMemoryCgroup() {
    const std::string own = own_memory_cgroup_v1();
    if (own.empty()) {
      why_not = "no v1 memory cgroup in /proc/self/cgroup";
      return;
    }
    cg.emplace(own);
    if (!cg->ok() || !cg->set("memory.limit_in_bytes", std::to_string(64 << 20))) {
      why_not = "cannot make a memory cgroup with a limit under " + own;
      cg.reset();
      return;
    }
    if (!read_file(cg->file("memory.memsw.limit_in_bytes")).empty())
      cg->set("memory.memsw.limit_in_bytes", std::to_string(64 << 20));
  }
  // The launcher's command line run inside the cgroup (its workers start there too).
  std::vector<std::string> wrap(std::vector<std::string> argv) const {
    std::vector<std::string> out = {"sh", "-c", "echo $$ > \"$0/cgroup.procs\" && exec \"$@\"", cg->dir()};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }
};

// Rank 1 runs `rank1` (exec'd: its pid stays the worker's); rank 0 waits for
// the teardown's SIGTERM (a sleep without a trap: no shell's trap can race with it).
std::string memory_worker(const TempDir& out, const std::string& rank1) {
  return worker_script(out,
      "echo $$ > \"$OUT/pid.$RANK.tmp\"; mv \"$OUT/pid.$RANK.tmp\" \"$OUT/pid.$RANK\"\n"
      "[ \"$RANK\" = 1 ] && exec " + rank1 + "\n"
      "exec sleep 300\n");
}

}  // namespace

TEST_CASE("a worker the OOM killer ends is reported as such, with its cgroup's limit and its peak RSS") {
  SmallMemoryCgroup mem;  // declared first: removed once the launcher and its workers are gone
  if (!mem.cg) DDP_SKIP(mem.why_not);
  TempDir out;
  // dd fills one 256 MiB buffer from /dev/zero: every page is touched.
  const std::string w = memory_worker(out, "dd if=/dev/zero of=/dev/null bs=256M count=1");
  Proc p(mem.wrap({launcher(), "--standalone", "--nproc_per_node", "2", "--shutdown_timeout", "2", w}),
         {{"OUT", out.path()}});
  const auto code = p.wait(30);
  INFO(p.output());
  REQUIRE(code.has_value());
  CHECK(*code == 137);
  if (read_file(mem.cg->file("memory.oom_control")).find("oom_kill 0") != std::string::npos)
    FAIL("the kernel's oom_kill counter did not rise: the worker was not OOM-killed");
  CHECK_THAT(report_value(p.output(), "message   "),
             Catch::Matches("killed by the kernel's OOM killer \\(memory.limit_in_bytes 64 MiB; peak RSS [0-9.]+ MiB\\)"));
  CHECK_THAT(report_value(p.output(), "rank      "), Catch::StartsWith("1 "));
}

TEST_CASE("a worker SIGKILLed by someone else in the same cgroup is not called OOM-killed") {
  SmallMemoryCgroup mem;
  if (!mem.cg) DDP_SKIP(mem.why_not);
  TempDir out;
  const std::string w = memory_worker(out, "sleep 300");
  Proc p(mem.wrap({launcher(), "--standalone", "--nproc_per_node", "2", "--shutdown_timeout", "2", w}),
         {{"OUT", out.path()}});
  REQUIRE(wait_until([&] { return read_pid(out.file("pid.1")) > 0 && read_pid(out.file("pid.0")) > 0; }, 20));
  ::kill(read_pid(out.file("pid.1")), SIGKILL);
  const auto code = p.wait(30);
  INFO(p.output());
  REQUIRE(code.has_value());
  CHECK(*code == 137);
  CHECK_THAT(report_value(p.output(), "message   "), Catch::StartsWith("Signal 9 (SIGKILL) received by PID"));
  CHECK_THAT(p.output(), !Catch::Contains("OOM"));
}
