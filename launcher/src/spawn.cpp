#include "ddp/launcher/spawn.h"

// Boost 1.74 compiles its vfork executor only under old feature-test macros;
// glibc has vfork regardless.
#ifndef BOOST_POSIX_HAS_VFORK
#define BOOST_POSIX_HAS_VFORK 1
#endif

#include <boost/process/args.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/extend.hpp>
#include <boost/process/posix.hpp>

#include <cerrno>
#include <sys/prctl.h>
#include <unistd.h>

namespace ddp::launcher {
namespace bp = boost::process;

int SpawnError::shell_code() const { return errno_value == ENOENT ? 127 : 126; }

pid_t spawn_worker(const std::string& exe, const std::vector<std::string>& args, const EnvMap& env,
                   const sigset_t& child_mask) {
  bp::environment benv;
  for (const auto& [k, v] : env) benv[k] = v;
  const pid_t launcher = ::getpid();
  const sigset_t mask = child_mask;

  // Runs in the child between fork and exec: async-signal-safe calls only.
  auto setup = [launcher, mask](auto&) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(128 + SIGKILL);  // the launcher died before prctl
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  };

  try {
    // vfork: no page-table copy (~1 ms per worker here); the launcher is
    // suspended until the child has exec'd, and the setup above only makes
    // system calls, which is what vfork allows.
    bp::child c(bp::exe = exe, bp::args = args, bp::env = benv, bp::extend::on_exec_setup(setup),
                bp::posix::use_vfork);
    const pid_t pid = c.id();
    c.detach();
    // Also from the parent, so a signal forwarded right now finds the group
    // even if the child has not run setpgid yet (EACCES after exec is fine).
    ::setpgid(pid, pid);
    return pid;
  } catch (const bp::process_error& e) {
    throw SpawnError(e.what(), e.code().value());
  }
}

}  // namespace ddp::launcher
