#include "ddp/launcher/spawn.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ddp::launcher {

int SpawnError::shell_code() const {
  if (fork_failed) return 1;
  return errno_value == ENOENT ? 127 : 126;
}

std::string process_limit_text(int err) {
  if (err != EAGAIN && err != ENOMEM) return "";
  std::string out = "processes are limited to ";
  rlimit rl{};
  const bool per_user = ::getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && ::geteuid() != 0;
  if (per_user) out += std::to_string(rl.rlim_cur) + " per user (ulimit -u) and ";
  long pid_max = 0;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  out += pid_max > 0 ? std::to_string(pid_max) + " in all (kernel.pid_max)" : "the kernel's pid_max";
  return out;
}

namespace {

// A CPU set of any size (CPU_ALLOC), built before vfork; apply() is a bare
// syscall, safe in the child. Empty: nothing to apply.
class CpuSet {
 public:
  explicit CpuSet(const std::vector<int>& cpus) {
    if (cpus.empty()) return;
    const int max_cpu = *std::max_element(cpus.begin(), cpus.end());
    size_ = CPU_ALLOC_SIZE(max_cpu + 1);
    set_ = CPU_ALLOC(max_cpu + 1);
    if (!set_) throw SpawnError("cannot allocate a CPU set for --numa_binding", ENOMEM, true);
    CPU_ZERO_S(size_, set_);
    for (int c : cpus) CPU_SET_S(c, size_, set_);
  }
  ~CpuSet() {
    if (set_) CPU_FREE(set_);
  }
  CpuSet(const CpuSet&) = delete;
  CpuSet& operator=(const CpuSet&) = delete;
  bool apply() const { return !set_ || ::sched_setaffinity(0, size_, set_) == 0; }

 private:
  cpu_set_t* set_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

pid_t spawn_worker(const SpawnSpec& spec) {
  // Everything the child touches is built before vfork: it may not allocate.
  std::vector<std::string> env_strings;
  env_strings.reserve(spec.env.size());
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = spec.exe;
  std::vector<std::string> args = spec.args;
  argv.push_back(exe.data());
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  sigset_t mask;
  if (spec.child_mask) mask = *spec.child_mask;
  else ::sigprocmask(SIG_SETMASK, nullptr, &mask);

  // --numa_binding: the CPU set is allocated here, the child only applies it.
  const CpuSet cpus(spec.cpus);
  volatile bool affinity_failed = false;

  const pid_t launcher = ::getpid();
  // The vfork child shares our memory until exec: it reports a failed exec
  // here, and the parent reads it once the child has exec'd or exited.
  volatile int exec_errno = 0;

  // vfork: no page-table copy (~1 ms per worker here); the launcher is
  // suspended until the child has exec'd.
  const pid_t pid = ::vfork();
  if (pid == 0) {
    if (spec.new_session) ::setsid();
    else ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(128 + SIGKILL);  // the launcher died before prctl
    if ((spec.stdin_fd >= 0 && ::dup2(spec.stdin_fd, 0) < 0) ||
        (spec.stdout_fd >= 0 && ::dup2(spec.stdout_fd, 1) < 0) ||
        (spec.stderr_fd >= 0 && ::dup2(spec.stderr_fd, 2) < 0)) {
      exec_errno = errno;
      ::_exit(126);
    }
    if (!cpus.apply()) {
      exec_errno = errno;
      affinity_failed = true;
      ::_exit(126);
    }
    ::signal(SIGPIPE, SIG_DFL);  // the launcher ignores it; exec would keep that
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    ::execve(exe.c_str(), argv.data(), envp.data());
    exec_errno = errno;
    ::_exit(errno == ENOENT ? 127 : 126);
  }
  if (pid < 0) {
    const int e = errno;
    throw SpawnError(std::string("fork failed: ") + std::strerror(e), e, true);
  }
  if (exec_errno != 0) {
    const int e = exec_errno;
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw SpawnError(std::string(affinity_failed ? "binding to CPUs (--numa_binding) failed: " : "execve failed: ") +
                         std::strerror(e),
                     e, false);
  }
  return pid;
}

}  // namespace ddp::launcher
