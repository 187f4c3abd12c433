#pragma once
// The cleanup that must happen even when the launcher is SIGKILLed. A worker's
// PR_SET_PDEATHSIG reaches the worker only, not what it started; and a killed
// launcher cannot remove its run directory. So the launcher forks this tiny
// watchdog first: it holds one end of a socket whose other end only the
// launcher has (close-on-exec, so workers never hold it), learns every
// worker's process group as it starts and ends, and when the socket reaches
// EOF (the launcher exited, however it died) it SIGKILLs the groups still
// listed, waits (at most kCleanupWaitS) until their leaders are dead, removes
// their leaders' shared-memory segments (/dev/shm/ddp-shm-<pid>-*, the
// worker runtime's naming: see shm_segments.h) and the run directory, then
// exits.
// What still escapes: a process that left the workers' groups (setsid,
// setpgid), and anything started between a worker's fork and its group
// being announced here (the worker itself is covered by PDEATHSIG).
// The watchdog keeps the launcher's signals blocked and has a session of its
// own (a Ctrl-C to the terminal's foreground group, or a kill(-pgid) aimed
// at the launcher, must not kill it) and keeps no stdio open, so nobody
// waiting for the launcher's output waits for it.
// Its name: comm "ddp-watchdog" (PR_SET_NAME) and a command line of
// "ddp-watchdog" alone: the forked child overwrites its copy of the
// launcher's argv block (the memory /proc/PID/cmdline reads, found through
// /proc/self/stat's arg_start/arg_end), so `ps` tells it from the launcher
// and `pkill -f ddp-launch` does not kill it. Chosen over re-executing
// /proc/self/exe in a hidden mode: an exec'd watchdog was measured slower
// (its start competes with the workers'), and the launcher's binary may be
// gone (deleted or replaced) while it runs.
// Its end: the launcher reaps it. finish() shuts the socket (the supervisor
// calls it once every group is gone, so the watchdog's exit overlaps the
// report), ~Watchdog waits (at most kCleanupWaitS) for the watchdog's end to
// close and reaps it, so no
// `[ddp-watchdog] <defunct>` is left under a PID 1 (or subreaper) that does
// not reap. It is the launcher's child like the workers; WorkerGroup tells
// it apart by pid() (never a worker) and, should someone kill it, the
// supervisor calls replace() and announces the live groups again, so a
// SIGKILL of the launcher afterwards is still cleaned up.

#include <string>
#include <vector>
#include <sys/types.h>

namespace ddp::launcher {

class Watchdog {
 public:
  static constexpr double kCleanupWaitS = 2.0;

  // Forks the watchdog. Throws SpawnError when the fork is refused.
  explicit Watchdog(const std::string& run_dir);
  // finish(), then waits (at most kCleanupWaitS) until the watchdog has
  // exited, and reaps it.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void add_group(pid_t pgid);
  void remove_group(pid_t pgid);
  // The run directory must outlive the launcher (the report names files in
  // it): the watchdog still kills what is listed, but leaves the directory.
  void keep_run_dir();
  // Shuts the launcher's end of the socket: the watchdog kills what is
  // still listed, cleans up and exits. Nothing can be sent afterwards.
  void finish();
  // The running watchdog's pid; -1 when there is none (it died and could
  // not be replaced).
  pid_t pid() const { return pid_; }

  // The launcher reaped pid() (someone killed the watchdog): forks a new one,
  // which knows no group yet (the caller announces them). Throws SpawnError
  // when the fork is refused; pid() is then -1 and every call a no-op.
  void replace();
  // replace() after the launcher reaped the dead one (wait status `status`),
  // telling the new one the live `groups`. Returns the warning line: how it
  // died, and the new pid or why there is none.
  std::string replace_dead(int status, const std::vector<pid_t>& groups);

 private:
  void start();
  void send(int value);
  std::string run_dir_;
  bool finished_ = false;
  int fd_ = -1;
  pid_t pid_ = -1;
};

}  // namespace ddp::launcher
