#pragma once
// The kernel's OOM killer as the cause of a worker's SIGKILL. A worker that
// dies of a SIGKILL the launcher did not send was killed by someone: when
// the oom_kill counter of its memory cgroup rose since the attempt began, or
// the kernel log (/dev/kmsg, where readable: root or kernel.dmesg_restrict=0)
// says "Killed process <pid>" for it since then, that someone was the OOM
// killer, and the report says so:
//   killed by the kernel's OOM killer (memory.max 24 GiB; peak RSS 23.1 GiB)
// The counter: cgroup v2 memory.events `oom_kill`, cgroup v1
// memory.oom_control `oom_kill` (both count the kills in that cgroup and
// below it, whether the cgroup's limit or the whole machine ran out). The
// limit: v2 the smallest memory.max of the cgroup and its ancestors, v1
// memory.stat's hierarchical_memory_limit. Peak RSS: the worker's own, from
// wait4 (WorkerExit::max_rss_kb).
// Which cgroup: the launcher's own (/proc/self/cgroup), read once before
// each attempt: workers inherit it at fork and the launcher never moves
// them (a Slurm step, a container, a systemd scope). A worker that moves
// itself elsewhere is judged by the launcher's cgroup. Each rise of the
// counter explains one SIGKILL, so a later `kill -9` by a person in the same
// attempt is not blamed on the OOM killer too.
// Mounts: v1 controllers at <mount>/memory, v2 at <mount> (or
// <mount>/unified), <mount> being /sys/fs/cgroup; a cgroup path that is not
// there (a container without its own cgroup namespace) falls back to the
// mount's root, which is then the container's own cgroup.
// The kernel log names the process by its pid in the kernel's first pid
// namespace: inside a container's own pid namespace it does not match and
// only the counter speaks (such containers rarely may read /dev/kmsg anyway).
// Parsing and formatting are pure; the readers take the roots, so tests
// point them at fake trees (v1 and v2 layouts) and a fake kernel log.

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

struct MemoryCgroup {
  int version = 0;   // 1 or 2
  std::string dir;   // the cgroup's directory
  std::string root;  // the hierarchy's mount (v2: memory.max is looked for up to here)
};

// The memory cgroup named in /proc/<pid>/cgroup's text (v1's memory line
// first, else v2's "0::" line) whose counter file exists under cgroup_mount;
// nullopt when there is none.
std::optional<MemoryCgroup> find_memory_cgroup(const std::string& proc_cgroup_text, const std::string& cgroup_mount);

// The `oom_kill N` line of memory.events (v2) or memory.oom_control (v1).
std::optional<long long> parse_oom_kill(const std::string& key_value_text);
// A limit file's value in bytes; nullopt for "max" and v1's "unlimited"
// (a number of 2^60 or more), or text that is not a number.
std::optional<long long> parse_memory_limit(const std::string& text);

std::optional<long long> read_oom_kill_count(const MemoryCgroup& cg);
// The limit the cgroup's processes live under; nullopt when none.
std::optional<long long> read_memory_limit(const MemoryCgroup& cg);

// "24 GiB", "23.1 GiB", "64 MiB", "512 KiB": three significant digits at most.
std::string byte_size_text(long long bytes);

// The pids in /dev/kmsg records ("6,2339,10920559012,-;Memory cgroup out of
// memory: Killed process 4610 (python3) total-vm:...") and in dmesg's lines.
std::vector<pid_t> parse_oom_victims(const std::string& kernel_log_text);

// killed by the kernel's OOM killer (memory.max 24 GiB; peak RSS 23.1 GiB)
// killed by the kernel's OOM killer (no memory limit on its cgroup: the machine ran out; peak RSS 23.1 GiB)
// killed by the kernel's OOM killer (named by the kernel log; peak RSS 23.1 GiB)   (version 0: no cgroup known)
std::string format_oom_kill(int cgroup_version, std::optional<long long> limit_bytes, long max_rss_kb);

// One per attempt: the counter before it, and the SIGKILLs it explained.
class OomWatch {
 public:
  // Reads the cgroup of `pid` ("self": the launcher) and its counter now.
  // kernel_log: read from its end on (what is there now is older).
  explicit OomWatch(const std::string& proc_root = "/proc", const std::string& cgroup_mount = "/sys/fs/cgroup",
                    const std::string& pid = "self", const std::string& kernel_log = "/dev/kmsg");
  ~OomWatch();
  OomWatch(const OomWatch&) = delete;
  OomWatch& operator=(const OomWatch&) = delete;
  // Worker `pid` died of a SIGKILL the launcher did not send: the report's
  // text when the kernel log named it, or the counter rose by more than the
  // kills already explained; else "".
  std::string explain_sigkill(pid_t pid, long max_rss_kb);
  bool active() const { return baseline_.has_value() || kmsg_ >= 0; }

 private:
  void read_kernel_log();
  std::optional<MemoryCgroup> cg_;
  std::optional<long long> baseline_;
  long long explained_ = 0;
  int kmsg_ = -1;
  std::vector<pid_t> victims_;  // named by the kernel log since the start
};

}  // namespace ddp::launcher
