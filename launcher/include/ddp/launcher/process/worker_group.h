#pragma once
// The launcher's workers as process groups: spawn, signal, reap, and "is the
// group empty". In the style of ninja's SubprocessSet and tini's main loop;
// the supervisor decides policy (when to stop, restart, report), this class
// does the process bookkeeping and nothing else.
//  - Each worker leads its own process group (see spawn.h); the group id is
//    the worker's pid and is only ever admitted here from a successful
//    spawn, so no signal goes to a pid <= 1.
//  - reap() is the launcher's only wait: wait4(-1, WNOHANG | WUNTRACED |
//    WCONTINUED) until nothing is left to collect. As child subreaper the
//    launcher also collects orphaned descendants; they are never mistaken
//    for workers.
//  - A group is dropped as soon as kill(-pgid, 0) says it has no process
//    left, checked after every reap; signals go only to groups still listed,
//    so a group id whose number the kernel has handed out again is never
//    signalled.
//  - Terminal policy: the launcher's stdin goes to local rank 0 only (so a
//    debugger works on rank 0) and only while the launcher may read its
//    terminal (not a background job); every other worker reads /dev/null.
//    When that stdin is a terminal, rank 0 gets a session of its own, so
//    reading it never stops rank 0 with SIGTTIN (the others are background
//    groups of the launcher's session but do not read the terminal). A
//    worker stopped anyway (SIGSTOP, SIGTSTP, SIGTTIN from opening /dev/tty)
//    is reported by reap(), and a teardown signal is followed by SIGCONT so
//    it is not waited on forever.
//  - A Watchdog, when given, is told each group's start and end. It is a
//    child of the launcher too: reap() collects it like any child should it
//    die, and marks that event is_watchdog (never a worker).
//  - A group that is gone has its leader's shared-memory segments removed
//    (shm_segments.h: a worker killed while setting one up leaks it) before
//    the watchdog hears of its end, so one of the two always does it.

#include "ddp/launcher/process/spawn.h"
#include "ddp/launcher/process/workers.h"

#include <csignal>
#include <string>
#include <sys/resource.h>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

class Standby;
class Watchdog;

class WorkerGroup : public Workers {
 public:
  // child_mask: the signal mask workers get back before exec.
  WorkerGroup(const sigset_t& child_mask, Watchdog* watchdog);
  ~WorkerGroup() override;
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Starts one worker as its own group. keeps_stdin: it reads the launcher's
  // stdin (see stdin_is_ours), else /dev/null. Throws SpawnError.
  pid_t spawn(SpawnSpec spec, int local_rank, bool keeps_stdin);
  // The same worker, from the standby when it can take it (standby.h: the
  // same program and number of arguments, ready, no CPU binding, not a
  // terminal's session),
  // recorded exactly as spawn() records its own. Returns 0 when it could
  // not (`why` says why): the caller then spawns. Its group is already the
  // watchdog's (the standby told it).
  pid_t adopt(Standby& standby, SpawnSpec spec, int local_rank, bool keeps_stdin, std::string& why);

  struct Event {
    enum Kind { Exited, Stopped, Continued } kind = Exited;
    pid_t pid = 0;
    bool is_worker = false;  // false: an orphaned descendant adopted as subreaper, or the watchdog
    bool is_watchdog = false;  // the watchdog died (someone killed it)
    int local_rank = -1;
    int status = 0;          // wait status
    long max_rss_kb = 0;
    double cpu_s = 0;        // user + system time of an exited worker (wait4)
  };
  // Collects every child that changed state; never blocks. Afterwards groups
  // with no process left are dropped.
  std::vector<Event> reap();

  // Sends sig to every group still listed; after any signal but SIGKILL and
  // SIGCONT also SIGCONT, so stopped members act on it. Returns the number of
  // groups signalled.
  int signal_all(int sig) override;

  bool empty() const override { return groups_.empty(); }        // no process of any group left
  int running_workers() const override { return running_; }      // workers not yet reaped
  const std::vector<pid_t>& groups() const { return groups_; }

 private:
  struct Member {
    pid_t pid;
    int local_rank;
    bool reaped;
  };
  void prune();
  // A worker's stdin and session, the same for a spawn and an adoption.
  void set_stdio(SpawnSpec& spec, bool keeps_stdin) const;
  // Records a started worker (its pid leads its group).
  void track(pid_t pid, int local_rank);

  sigset_t child_mask_;
  Watchdog* watchdog_;
  int devnull_ = -1;
  std::vector<Member> workers_;
  std::vector<pid_t> groups_;
  int running_ = 0;
};

// Whether a worker may read the launcher's stdin: not a terminal, or a
// terminal whose foreground process group is the launcher's (a background
// job's worker would steal the shell's input).
bool stdin_is_ours();

}  // namespace ddp::launcher
