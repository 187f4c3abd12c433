// The unkillable-worker lines (unkillable.h) on fake /proc text and a fake
// /proc tree: no process is frozen here (test_kernel_verdicts.cpp does that).
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/report/summary.h"
#include "ddp/launcher/diagnose/unkillable.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace ddp::launcher;

namespace {

// A stat line as the kernel writes it: pid (comm) state ppid pgrp session tty tpgid flags ...
std::string stat_line(int pid, const std::string& comm, char state, int ppid, int pgid, unsigned long flags = 0x400000) {
  return std::to_string(pid) + " (" + comm + ") " + state + " " + std::to_string(ppid) + " " + std::to_string(pgid) +
         " " + std::to_string(pgid) + " 0 -1 " + std::to_string(flags) + " 120 0 0 0 1 2 0 0 20 0 1 0 100 1000 50\n";
}

void fake_proc(ddp::test::ScratchDir& root, int pid, const std::string& stat, const std::string& wchan,
               const std::string& sub = "") {
  const std::string dir = root.dir + "/" + (sub.empty() ? std::to_string(pid) : sub);
  std::filesystem::create_directories(dir);
  root.make((sub.empty() ? std::to_string(pid) : sub) + "/stat", stat, 0644);
  root.make((sub.empty() ? std::to_string(pid) : sub) + "/wchan", wchan, 0644);
}

}  // namespace

TEST_CASE("a /proc stat line: the name may hold spaces and parentheses") {
  const auto s = parse_proc_stat(stat_line(4242, "py (thon) x", 'D', 1, 4242, 0x404044));
  REQUIRE(s);
  CHECK(s->comm == "py (thon) x");
  CHECK(s->state == 'D');
  CHECK(s->ppid == 1);
  CHECK(s->pgid == 4242);
  CHECK(s->flags == 0x404044);
  CHECK_FALSE(parse_proc_stat("").has_value());
  CHECK_FALSE(parse_proc_stat("12 (x").has_value());
  CHECK_FALSE(parse_proc_stat("12 (x) D").has_value());
}

TEST_CASE("an unkillable worker's line names its rank, pid, state and wait channel") {
  UnkillableProcess u;
  u.rank = 1;
  u.pid = 4242;
  u.proc.state = 'D';
  u.proc.wchan = "nfs_wait_bit_killable";
  CHECK(format_unkillable(u) ==
        "rank 1 (pid 4242) is in uninterruptible sleep (D, wchan nfs_wait_bit_killable) and cannot be killed");
  u.proc.wchan = "";  // kernel.kptr_restrict or no wchan: the state alone
  CHECK(format_unkillable(u) == "rank 1 (pid 4242) is in uninterruptible sleep (D) and cannot be killed");
  u.proc.wchan = "uvm_wait";
  u.proc.tid = 4250;  // a thread of it is the one in D
  CHECK(format_unkillable(u) ==
        "rank 1 (pid 4242) is in uninterruptible sleep (D, wchan uvm_wait, thread 4250) and cannot be killed");
  u.proc.tid = 0;
  u.proc.flags = 0x4;  // PF_EXITING: SIGKILL took, the exit does not finish
  CHECK(format_unkillable(u) ==
        "rank 1 (pid 4242) has begun to exit but not finished (D, wchan uvm_wait): the kernel is still releasing it");
  UnkillableProcess child;
  child.rank = 3;
  child.pid = 5000;
  child.worker = false;
  child.proc.comm = "pt_data_worker";
  child.proc.state = 'Z';
  child.proc.ppid = 77;
  CHECK(format_unkillable(child) ==
        "rank 3's process 5000 (pt_data_worker, in its group) is a zombie (Z) that its parent (pid 77) has not reaped");
}

TEST_CASE("find_unkillable: the processes of the given groups from a /proc tree, a stuck thread shown") {
  ddp::test::ScratchDir proc;
  fake_proc(proc, 4242, stat_line(4242, "python3", 'D', 100, 4242), "nfs_wait_bit_killable\n");
  fake_proc(proc, 4300, stat_line(4300, "pt_data_worker", 'S', 4242, 4242), "do_select\n");
  fake_proc(proc, 4301, stat_line(4301, "pt_data_worker", 'S', 4242, 4242), "0");  // another: its thread is in D
  fake_proc(proc, 4301, stat_line(4302, "cuda-EvtHandlr", 'D', 4242, 4242), "uvm_wait\n", "4301/task/4302");
  fake_proc(proc, 4301, stat_line(4301, "pt_data_worker", 'S', 4242, 4242), "0", "4301/task/4301");
  fake_proc(proc, 999, stat_line(999, "bash", 'S', 1, 999), "do_wait\n");  // not one of ours
  proc.make("self", "not a pid", 0644);
  const auto found = find_unkillable(proc.dir, {{4242, 1}}, 8);
  REQUIRE(found.size() == 3);
  CHECK(format_unkillable(found[0]) ==
        "rank 9 (pid 4242) is in uninterruptible sleep (D, wchan nfs_wait_bit_killable) and cannot be killed");
  CHECK(found[1].pid == 4300);
  CHECK_FALSE(found[1].worker);
  CHECK(format_unkillable(found[2]) == "rank 9's process 4301 (pt_data_worker, in its group) is in uninterruptible "
                                       "sleep (D, wchan uvm_wait, thread 4302) and cannot be killed");
  CHECK(find_unkillable(proc.dir, {}, 0).empty());
  CHECK(find_unkillable(proc.dir + "/none", {{4242, 1}}, 0).empty());
}

TEST_CASE("the failure report and the summary show the workers left behind, and there is no restart") {
  AttemptResult a;
  a.attempt = 0;
  WorkerExit w;
  w.rank = 0;
  w.pid = 100;
  w.code = 5;
  a.exits.push_back(w);
  a.root_cause = w;
  UnkillableProcess u;
  u.rank = 1;
  u.local_rank = 1;
  u.pid = 4242;
  u.proc.state = 'D';
  u.proc.wchan = "nfs_wait_bit_killable";
  CHECK(a.restartable());
  a.unkillable.push_back(u);
  CHECK_FALSE(a.restartable());
  const std::string report = format_failure_report({a}, "h", 3);
  CHECK_THAT(report, Catch::Contains("Not killed (still there 5 s after SIGKILL; the launcher ended without them; "
                                     "the group is not restarted: they keep their GPUs, ports and files):\n"
                                     "  rank 1 (pid 4242) is in uninterruptible sleep (D, wchan "
                                     "nfs_wait_bit_killable) and cannot be killed\n"));
  CHECK_THAT(format_failure_report({a}, "h", 0), !Catch::Contains("not restarted"));  // it had no restarts anyway
  RunTotals t;
  t.exit_code = 5;
  CHECK_THAT(format_run_summary({a}, t), Catch::Contains("     1          1      4242 not killed"));
  CHECK_THAT(format_summary_json({a}, t),
             Catch::Contains("\"not_killed\": [{\"rank\": 1, \"pid\": 4242, \"worker\": true, \"state\": \"D\", "
                             "\"wchan\": \"nfs_wait_bit_killable\"}]"));
}
