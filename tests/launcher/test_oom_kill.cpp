// OOM kills named (oom_kill.h) on fake /proc/<pid>/cgroup text and fake
// cgroup trees in both layouts; test_kernel_verdicts.cpp has the real one.
#include "ddp/launcher/diagnose/oom_kill.h"
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/report/summary.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace ddp::launcher;
using ddp::test::ScratchDir;

namespace {

void put(ScratchDir& root, const std::string& rel, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(root.dir + "/" + rel).parent_path());
  root.make(rel, text, 0644);
}

std::string oom_control(int kills) { return "oom_kill_disable 0\nunder_oom 0\noom_kill " + std::to_string(kills) + "\n"; }
std::string events(int kills) {
  return "low 0\nhigh 0\nmax 12\noom 2\noom_kill " + std::to_string(kills) + "\noom_group_kill 0\n";
}

}  // namespace

TEST_CASE("memory cgroup files: oom_kill counters and limits") {
  CHECK(parse_oom_kill(oom_control(3)) == 3);
  CHECK(parse_oom_kill(events(7)) == 7);  // not oom (2) nor oom_group_kill
  CHECK_FALSE(parse_oom_kill("oom 2\n").has_value());
  CHECK(parse_memory_limit("25769803776\n") == 25769803776LL);
  CHECK_FALSE(parse_memory_limit("max\n").has_value());
  CHECK_FALSE(parse_memory_limit("9223372036854771712\n").has_value());  // v1's unlimited
  CHECK_FALSE(parse_memory_limit("").has_value());
  CHECK(byte_size_text(24LL << 30) == "24 GiB");
  CHECK(byte_size_text(static_cast<long long>(23.1 * (1LL << 30))) == "23.1 GiB");
  CHECK(byte_size_text(64 << 20) == "64 MiB");
  CHECK(byte_size_text(512 << 10) == "512 KiB");
  CHECK(byte_size_text(static_cast<long long>(99.97 * (1 << 20))) == "100 MiB");
  CHECK(format_oom_kill(2, 24LL << 30, static_cast<long>(23.1 * (1 << 20))) ==
        "killed by the kernel's OOM killer (memory.max 24 GiB; peak RSS 23.1 GiB)");
  CHECK(format_oom_kill(1, 64LL << 20, 62 * 1024) ==
        "killed by the kernel's OOM killer (memory.limit_in_bytes 64 MiB; peak RSS 62 MiB)");
  CHECK(format_oom_kill(2, std::nullopt, 0) ==
        "killed by the kernel's OOM killer (no memory limit on its cgroup: the machine ran out)");
}

TEST_CASE("the memory cgroup of /proc/<pid>/cgroup: v1 (hybrid) and v2 layouts, a container's root") {
  ScratchDir fs;
  const std::string hybrid = "12:pids:/\n4:memory:/slurm/uid_1/job_7/step_0\n1:name=systemd:/\n0::/user.slice\n";
  put(fs, "v1/memory/slurm/uid_1/job_7/step_0/memory.oom_control", oom_control(0));
  put(fs, "v1/unified/user.slice/cgroup.procs", "");  // hybrid: a v2 tree without the memory controller
  auto v1 = find_memory_cgroup(hybrid, fs.dir + "/v1");
  REQUIRE(v1);
  CHECK(v1->version == 1);
  CHECK(v1->dir == fs.dir + "/v1/memory/slurm/uid_1/job_7/step_0");

  put(fs, "v2/system.slice/job.scope/memory.events", events(0));
  auto v2 = find_memory_cgroup("0::/system.slice/job.scope\n", fs.dir + "/v2");
  REQUIRE(v2);
  CHECK(v2->version == 2);
  CHECK(v2->dir == fs.dir + "/v2/system.slice/job.scope");
  CHECK(v2->root == fs.dir + "/v2");

  // A container without a cgroup namespace: the path names the host's cgroup,
  // the mount shows the container's own at its root.
  put(fs, "c/memory.events", events(0));
  auto c = find_memory_cgroup("0::/kubepods/burstable/pod1/abc\n", fs.dir + "/c");
  REQUIRE(c);
  CHECK(c->dir == fs.dir + "/c");

  CHECK_FALSE(find_memory_cgroup("0::/x\n", fs.dir + "/none").has_value());
  CHECK_FALSE(find_memory_cgroup("garbage", fs.dir + "/v2").has_value());
}

TEST_CASE("limits: v2's smallest memory.max up the tree, v1's hierarchical limit") {
  ScratchDir fs;
  put(fs, "v2/memory.events", events(0));  // the root has no memory.max
  put(fs, "v2/job/memory.max", std::to_string(24LL << 30) + "\n");
  put(fs, "v2/job/step/memory.max", "max\n");
  put(fs, "v2/job/step/task/memory.max", std::to_string(32LL << 30) + "\n");
  put(fs, "v2/job/step/task/memory.events", events(0));
  MemoryCgroup v2{2, fs.dir + "/v2/job/step/task", fs.dir + "/v2"};
  CHECK(read_memory_limit(v2) == (24LL << 30));
  put(fs, "v2/free/memory.max", "max\n");
  CHECK_FALSE(read_memory_limit(MemoryCgroup{2, fs.dir + "/v2/free", fs.dir + "/v2"}).has_value());

  put(fs, "v1/memory/a/memory.limit_in_bytes", "9223372036854771712\n");
  put(fs, "v1/memory/a/memory.stat", "cache 0\nrss 0\nhierarchical_memory_limit 67108864\ntotal_rss 0\n");
  CHECK(read_memory_limit(MemoryCgroup{1, fs.dir + "/v1/memory/a", fs.dir + "/v1/memory"}) == (64LL << 20));
}

TEST_CASE("OomWatch: a rise of the counter explains one SIGKILL each, no rise means no OOM") {
  ScratchDir fs;
  put(fs, "proc/self/cgroup", "0::/job\n");
  put(fs, "cg/job/memory.events", events(1));  // an OOM kill before this attempt
  put(fs, "cg/job/memory.max", std::to_string(64LL << 20) + "\n");
  OomWatch watch(fs.dir + "/proc", fs.dir + "/cg");
  REQUIRE(watch.active());
  CHECK(watch.explain_sigkill(42, 1000) == "");  // kill -9 by someone: the counter did not move
  put(fs, "cg/job/memory.events", events(2));
  CHECK(watch.explain_sigkill(43, 63 * 1024) ==
        "killed by the kernel's OOM killer (memory.max 64 MiB; peak RSS 63 MiB)");
  CHECK(watch.explain_sigkill(44, 1000) == "");  // that rise is spent
  OomWatch none(fs.dir + "/proc", fs.dir + "/nothing", "self", fs.dir + "/no-kmsg");
  CHECK_FALSE(none.active());
  CHECK(none.explain_sigkill(42, 1000) == "");
}

TEST_CASE("the kernel log: OOM victims' pids, read from where it ended when the attempt began") {
  CHECK(parse_oom_victims("3,2339,10920559012,-;Memory cgroup out of memory: Killed process 4610 (python3) "
                          "total-vm:221368kB, anon-rss:65152kB\n") == std::vector<pid_t>{4610});
  CHECK(parse_oom_victims("[ 5.1] Out of memory: Killed process 77 (a b) total-vm:1kB\n"
                          "[ 5.2] oom_reaper: reaped process 77 (a b), now anon-rss:0kB\n"
                          "[ 6.0] Out of memory: Killed process 78 (c)\n") == std::vector<pid_t>{77, 78});
  CHECK(parse_oom_victims("Killed process x (y)\nKilled process 12\n").empty());
  ScratchDir fs;
  put(fs, "proc/self/cgroup", "0::/none\n");  // no memory cgroup to read: the log alone decides
  const std::string kmsg = fs.make("kmsg", "6,1,1,-;Out of memory: Killed process 500 (old) total-vm:1kB\n", 0644);
  OomWatch watch(fs.dir + "/proc", fs.dir + "/cg", "self", kmsg);
  REQUIRE(watch.active());
  std::ofstream(kmsg, std::ios::app) << "3,2,2,-;Out of memory: Killed process 600 (python3) total-vm:1kB\n";
  CHECK(watch.explain_sigkill(500, 1000) == "");  // before the attempt
  CHECK(watch.explain_sigkill(601, 1000) == "");  // not named
  CHECK(watch.explain_sigkill(600, 2048) == "killed by the kernel's OOM killer (named by the kernel log; peak RSS 2 MiB)");
}

TEST_CASE("the report, the restart line and the summary say OOM-killed") {
  AttemptResult a;
  WorkerExit w;
  w.rank = 1;
  w.pid = 42;
  w.signaled = true;
  w.code = 9;
  w.oom = "killed by the kernel's OOM killer (memory.max 24 GiB; peak RSS 23.1 GiB)";
  a.exits.push_back(w);
  a.root_cause = w;
  CHECK_THAT(format_failure_report({a}, "h", 0),
             Catch::Contains("  message    : killed by the kernel's OOM killer (memory.max 24 GiB; peak RSS 23.1 GiB)\n"));
  CHECK(format_restart_line(a, 2) ==
        "ddp-launch: attempt 0 failed: rank 1 signal 9 (SIGKILL), killed by the kernel's OOM killer (memory.max 24 "
        "GiB; peak RSS 23.1 GiB); restarting the group (restart 1 of 2)");
  RunTotals t;
  CHECK_THAT(format_run_summary({a}, t), Catch::Contains(" OOM-killed "));
  a.root_cause.reset();  // another worker's failure was first: the OOM kill is in its line
  a.exits.insert(a.exits.begin(), WorkerExit{});
  a.exits.front().code = 3;
  a.root_cause = a.exits.front();
  CHECK_THAT(format_failure_report({a}, "h", 0),
             Catch::Contains("rank 1 (local_rank 0, pid 42): signal 9 (SIGKILL); killed by the kernel's OOM killer"));
}
