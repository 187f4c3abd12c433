#pragma once
// The cleanup that must happen even when the launcher is SIGKILLed. A worker's
// PR_SET_PDEATHSIG reaches the worker only, not what it started; and a killed
// launcher cannot remove its run directory. So the launcher forks this tiny
// watchdog first: it holds one end of a socket whose other end only the
// launcher has (close-on-exec, so workers never hold it), learns every
// worker's process group as it starts and ends, and when the socket reaches
// EOF (the launcher exited, however it died) it SIGKILLs the groups still
// listed and removes the run directory, then exits.
// What still escapes: a process that left the workers' groups (setsid,
// setpgid), and anything started between a worker's fork and its group
// being announced here (the worker itself is covered by PDEATHSIG).
// The watchdog keeps the launcher's signals blocked and has a session of its
// own (a Ctrl-C to the terminal's foreground group, or a kill(-pgid) aimed
// at the launcher, must not kill it) and keeps no stdio open, so nobody
// waiting for the launcher's output waits for it.

#include <string>
#include <sys/types.h>

namespace ddp::launcher {

class Watchdog {
 public:
  // Forks the watchdog. Throws SpawnError when the fork is refused.
  explicit Watchdog(const std::string& run_dir);
  // Closes the socket: the watchdog kills what is still listed and exits.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void add_group(pid_t pgid);
  void remove_group(pid_t pgid);
  // The run directory must outlive the launcher (the report names files in
  // it): the watchdog still kills what is listed, but leaves the directory.
  void keep_run_dir();
  pid_t pid() const { return pid_; }

 private:
  void send(int value);
  int fd_ = -1;
  pid_t pid_ = -1;
};

}  // namespace ddp::launcher
