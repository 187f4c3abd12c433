#pragma once
// Workers that SIGKILL cannot end. After SIGKILL a process is normally gone
// within milliseconds; one still there seconds later sits in the kernel: in
// uninterruptible sleep (D: a hung NFS server, a wedged GPU driver or RDMA
// device), frozen, or in an exit that cannot finish. The supervisor then
// asks /proc about every process left in the workers' groups, prints one
// line for each and goes on without them (supervisor.h: the attempt ends,
// the job is not restarted, the watchdog does not wait for them either).
//   rank 1 (pid 4242) is in uninterruptible sleep (D, wchan nfs_wait_bit_killable) and cannot be killed
// Parsing and formatting are pure (tests feed them fake /proc text);
// find_unkillable() is the one function here that reads files, under a
// /proc root that tests point at a fake tree.

#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace ddp::launcher {

// How long after SIGKILL a process still there counts as unkillable. Not
// less: a CUDA process's exit may spend seconds in the driver releasing its
// GPU memory, and that is not a hang.
constexpr double kAfterKillWaitS = 5.0;

// What /proc/<pid>/stat (or .../task/<tid>/stat) and wchan say of a process.
struct ProcSnapshot {
  std::string comm;         // field 2, without the parentheses
  char state = '?';         // field 3: R S D Z T t X I ...
  pid_t ppid = 0;           // field 4
  pid_t pgid = 0;           // field 5
  unsigned long flags = 0;  // field 9 (PF_EXITING is 0x4)
  std::string wchan;        // /proc/<pid>/wchan: the kernel function it waits in, "" when unknown ("0")
  pid_t tid = 0;            // the thread this state is of, 0: the process's main thread
};

// Fields 2-9 of a stat line; nullopt when it is not one. The name may hold
// spaces and ')': the last ')' ends it.
std::optional<ProcSnapshot> parse_proc_stat(const std::string& stat_text);

// proc(5)'s words for a state letter, to follow "is": 'D' "in uninterruptible sleep", 'Z' "a zombie", ...
std::string state_name(char state);

struct UnkillableProcess {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool worker = true;  // the worker itself; false: another process of its group (a child it started)
  ProcSnapshot proc;
};

// One line, no newline:
//   rank 1 (pid 4242) is in uninterruptible sleep (D, wchan nfs_wait_bit_killable) and cannot be killed
//   rank 1's process 4250 (python3, in its group) is in uninterruptible sleep (D, wchan ..., thread 4251) and ...
// A process whose exit has begun but not finished says so instead of "cannot be killed".
std::string format_unkillable(const UnkillableProcess& p);

// The failure report's block, "" when `procs` is empty. restarts_left: the
// job had restarts left that it does not use because of them.
std::string format_unkillable_block(const std::vector<UnkillableProcess>& procs, double after_kill_s,
                                    bool restarts_left);

// Every process under proc_root ("/proc") whose process group is one of
// `groups` (pgid, local rank), with rank = base_rank + local rank. When the
// main thread is not in D state but another thread is (a Python worker
// whose CUDA thread hangs), that thread's state and wait channel are shown.
std::vector<UnkillableProcess> find_unkillable(const std::string& proc_root,
                                               const std::vector<std::pair<pid_t, int>>& groups, int base_rank);

}  // namespace ddp::launcher
