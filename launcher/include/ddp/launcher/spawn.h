#pragma once
// Starting one worker with Boost.Process. Between fork and exec the child
// joins its own process group (so the launcher can signal it and everything
// it starts with kill(-pgid)), asks for SIGKILL when the launcher dies
// (PR_SET_PDEATHSIG; workers must not outlive a SIGKILLed launcher, which
// torchrun's do), exits at once if the launcher is already gone, and restores
// the launcher's original signal mask. The child is detached: the caller reaps
// it with its own waitpid loop, never through Boost's child object.

#include "ddp/launcher/options.h"

#include <csignal>
#include <stdexcept>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

// execve failed (errno kept): the launcher maps ENOENT to 127, others to 126.
struct SpawnError : std::runtime_error {
  SpawnError(const std::string& what, int err) : std::runtime_error(what), errno_value(err) {}
  int errno_value;
  int shell_code() const;
};

// Must be called from the main thread: the death signal is tied to the thread
// that forks. Throws SpawnError.
pid_t spawn_worker(const std::string& exe, const std::vector<std::string>& args,
                   const EnvMap& env, const sigset_t& child_mask);

}  // namespace ddp::launcher
