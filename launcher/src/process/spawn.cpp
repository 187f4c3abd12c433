#include "ddp/launcher/process/spawn.h"

#include "ddp/common/fd_io.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

// A name as it is, with control bytes escaped ("/bin/bash\r").
std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '\n') out += "\\n";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

std::string exec_failure_text(const std::string& exe, int err) {
  if (err != ENOENT && err != ENOEXEC) return "";
  // O_NONBLOCK: a FIFO put in the program's place must not block the launcher.
  const int fd = ::open(exe.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return "";  // gone: errno's own words say it
  struct stat st;
  char buf[256];
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ddp::fd::read_some(fd, buf, sizeof buf);
  ::close(fd);
  if (n < 0) return "";
  const std::string head(buf, static_cast<size_t>(n));
  if (head.rfind("#!", 0) == 0) {
    // The kernel's reading: the interpreter is the first word after "#!"
    // (blanks skipped), ended by a blank or the newline; a '\r' is part of it.
    const size_t nl = head.find('\n');
    const std::string line = head.substr(2, nl == std::string::npos ? std::string::npos : nl - 2);
    const size_t b = line.find_first_not_of(" \t");
    const std::string interp = b == std::string::npos ? "" : line.substr(b, line.find_first_of(" \t", b) - b);
    const bool crlf = !line.empty() && line.back() == '\r';
    const std::string windows =
        "; the script has Windows line endings (convert it with dos2unix, or sed -i 's/\\r$//' " + exe + ")";
    if (err == ENOENT && !interp.empty() && interp.back() == '\r')
      return "the interpreter '" + escaped(interp) + "' does not exist" + windows;
    if (err == ENOENT && !interp.empty() && ::access(interp.c_str(), F_OK) != 0)
      return "the interpreter '" + escaped(interp) + "' named by its #! line does not exist" + (crlf ? windows : "");
    if (interp.empty()) return "its #! line names no interpreter";
    return "";  // the interpreter exists: errno's own words are all we know
  }
  if (err == ENOENT)
    return head.rfind("\x7f" "ELF", 0) == 0
               ? "the file exists, but the dynamic loader it names is missing (built for another system or libc?)"
               : "";
  // ENOEXEC
  if (head.rfind("\x7f" "ELF", 0) == 0)
    return "not a program this machine can run: an ELF file for another architecture, or a damaged one";
  return "not a program this machine can run: neither a binary nor a script that starts with a #! line "
         "(add one, e.g. #!/bin/sh, or run it through its interpreter)";
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
    // Where Yama's ptrace_scope is 1 only ancestors may trace a process: let
    // the launcher's own children (the stack dump's eu-stack, gdb, py-spy)
    // attach to this worker too. EINVAL without Yama: nothing to allow.
    ::prctl(PR_SET_PTRACER, launcher, 0, 0, 0);
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
    // Ours alone: the vfork child has its own fd table.
    for (int fd : spec.inherit_fds) ::fcntl(fd, F_SETFD, 0);
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
    ddp::fd::retry_eintr([&] { return ::waitpid(pid, &status, 0); });
    // Why execve failed is read here, in the parent, once the child is gone:
    // the vfork child may not allocate or read files.
    const std::string why = affinity_failed ? "" : exec_failure_text(exe, e);
    throw SpawnError(std::string(affinity_failed ? "binding to CPUs (--numa_binding) failed: " : "execve failed: ") +
                         std::strerror(e) + (why.empty() ? "" : ": " + why),
                     e, false);
  }
  return pid;
}

}  // namespace ddp::launcher
