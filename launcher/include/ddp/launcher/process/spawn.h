#pragma once
// Starting one worker process. vfork + execve, written out here instead of
// through a library so that every failure is seen and typed: a fork that the
// kernel refuses (EAGAIN under `ulimit -u` or kernel.pid_max) and an exec that
// fails both throw SpawnError, and no pid <= 0 ever leaves this function.
// Between vfork and exec the child (async-signal-safe calls only):
//  - leads its own process group (setpgid), so the launcher reaches it and
//    everything it starts with kill(-pgid); the worker that keeps a terminal
//    as stdin starts its own session instead (setsid: its own group and no
//    controlling terminal, so reading the terminal never stops it with
//    SIGTTIN). Only that one: a new session costs a new scheduler autogroup,
//    which made every launch ~2x slower on a loaded machine;
//  - asks for SIGKILL when the launcher dies (PR_SET_PDEATHSIG) and exits at
//    once if the launcher is already gone;
//  - names the launcher its ptracer (PR_SET_PTRACER), so that under Yama's
//    ptrace_scope 1 the launcher's stack-dump tools may attach (stack_dump.h);
//  - takes /dev/null as stdin unless it is the worker that keeps the
//    launcher's stdin (see WorkerGroup), and the given stdout/stderr (a log
//    file, a --tee pipe, /dev/null) when log options ask for them;
//  - binds itself to the given CPUs (--numa_binding) when there are any;
//  - restores the launcher's original signal mask, and SIGPIPE's default
//    action (the launcher ignores SIGPIPE; an ignored signal stays ignored
//    across exec, and torchrun's workers get the default).
// The child is the caller's to reap (WorkerGroup does).

#include "ddp/launcher/config/options.h"

#include <csignal>
#include <stdexcept>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

// fork or exec failed (errno kept). Exec failures map to a shell's codes
// (127 not found, 126 otherwise); a refused fork is the launcher's failure (1).
// what(): "execve failed: <strerror>[: <exec_failure_text>]".
struct SpawnError : std::runtime_error {
  SpawnError(const std::string& what, int err, bool at_fork)
      : std::runtime_error(what), errno_value(err), fork_failed(at_fork) {}
  int errno_value;
  bool fork_failed;
  int shell_code() const;
};

struct SpawnSpec {
  std::string exe;
  std::vector<std::string> args;  // argv[1..]; argv[0] is exe
  EnvMap env;
  const sigset_t* child_mask = nullptr;  // restored before exec; nullptr keeps the current one
  int stdin_fd = -1;                     // dup'ed onto fd 0; -1 keeps the launcher's stdin
  int stdout_fd = -1;                    // dup'ed onto fd 1; -1 keeps the launcher's stdout
  int stderr_fd = -1;                    // dup'ed onto fd 2; -1 keeps the launcher's stderr
  bool new_session = false;              // setsid instead of setpgid (see above)
  std::vector<int> cpus;                 // sched_setaffinity before exec; empty keeps the launcher's
  std::vector<int> inherit_fds;          // close-on-exec fds this worker alone keeps, at the same numbers
};

// Must be called from the main thread: the death signal is tied to the thread
// that forks. Returns the pid (> 1), which is also the new process group's id
// (the child has joined it before this returns: vfork waits for the exec).
// Throws SpawnError.
pid_t spawn_worker(const SpawnSpec& spec);

// Why a fork may have been refused, with the limits that apply
// ("processes are limited to 6 per user (ulimit -u) and 32768 in all
// (kernel.pid_max)"); "" when errno is not about limits.
std::string process_limit_text(int err);

// What made execve(exe) fail with err, read from the file's first bytes by
// the parent after the child failed: a #! interpreter that does not exist
// (shown with control bytes escaped: '/bin/bash\r' for a script with Windows
// line endings), or a file that is neither a binary for this machine nor a
// #! script (ENOEXEC). "" when there is nothing to add to strerror (the file
// is gone, errno is another one).
std::string exec_failure_text(const std::string& exe, int err);

}  // namespace ddp::launcher
