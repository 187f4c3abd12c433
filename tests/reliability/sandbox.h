#pragma once
// One fault-injection case's private world, and the check that the run left
// nothing of it behind. A Sandbox owns a directory under $TMPDIR with
//   tmp/  the run's TMPDIR (the launcher's run directory goes there),
//   shm/  the run's /dev/shm (bind-mounted over /dev/shm in a private mount
//         namespace by wrap(), where unshare(1) may do that: root),
//   work/ checkpoints, outputs, marker files of the case;
// a marker variable in env() that every process of the run inherits; and it
// makes the test process a child subreaper, so every process that outlives
// the launcher (alive or a zombie) becomes the test's child and is seen.
// leftovers() lists what remains; clean_up() kills and reaps it, so the next
// case starts clean. Never sleeps: waits are on conditions with deadlines.

#include <map>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::test {

struct Leftovers {
  std::vector<std::string> processes;  // "pid 12 (ddp-watchdog) state Z"
  std::vector<std::string> tmp_files;  // under the run's TMPDIR
  std::vector<std::string> segments;   // under the run's /dev/shm (ddp-shm-*)
  int zombies = 0;                     // of `processes`, those in state Z
  bool empty() const { return processes.empty() && tmp_files.empty() && segments.empty(); }
  // Nothing but zombies (an unreaped child, e.g. the launcher's watchdog).
  bool only_zombies() const { return !empty() && tmp_files.empty() && segments.empty() &&
                                     zombies == static_cast<int>(processes.size()); }
  std::string describe() const;
};

class Sandbox {
 public:
  explicit Sandbox(const std::string& name);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  const std::string& marker() const { return marker_; }
  std::string tmp() const { return root_ + "/tmp"; }
  std::string shm() const { return root_ + "/shm"; }
  std::string work(const std::string& name = "") const { return root_ + "/work" + (name.empty() ? "" : "/" + name); }
  // TMPDIR and the marker, plus `extra`.
  std::map<std::string, std::string> env(std::map<std::string, std::string> extra = {}) const;
  // argv run with its own /dev/shm (shm()) when a private mount namespace can
  // be made here; else argv unchanged, and leftovers() compares /dev/shm's
  // ddp-shm-* segments with those present when the Sandbox was made.
  std::vector<std::string> wrap(const std::vector<std::string>& argv) const;
  bool private_shm() const { return private_shm_; }

  // What the run left. allow_zombies: a zombie is not counted (after a
  // SIGKILL of the launcher its watchdog outlives it by design, and init
  // reaps it). Waits up to settle_s for processes to go (0: look once).
  // launcher_output: the run directory its last line says it kept ("the
  // error files [and stack dumps] above are kept in DIR", docs/errors.md)
  // is not counted.
  Leftovers leftovers(bool allow_zombies = false, double settle_s = 0, const std::string& launcher_output = "");
  // SIGKILLs every process of the run still there and reaps the test's
  // orphaned children.
  void clean_up();

  // Pids of the run's live processes whose environment has NAME=VALUE for
  // every pair of `env` (e.g. RANK=1, TORCHELASTIC_RESTART_COUNT=0).
  std::vector<pid_t> find(const std::map<std::string, std::string>& env) const;
  // Waits up to timeout_s for exactly one such process; nullopt otherwise.
  std::optional<pid_t> wait_for(const std::map<std::string, std::string>& env, double timeout_s) const;

 private:
  std::string root_, marker_;
  bool private_shm_ = false;
  std::vector<std::string> shm_before_;
};

// Environment of a process as a map (empty for a zombie or a process gone).
std::map<std::string, std::string> environment_of(pid_t pid);
// Every pid in /proc.
std::vector<pid_t> all_pids();
// PPid and state letter from /proc/<pid>/stat; nullopt when gone.
struct ProcStat { pid_t ppid; char state; std::string comm; };
std::optional<ProcStat> stat_of(pid_t pid);

}  // namespace ddp::test
