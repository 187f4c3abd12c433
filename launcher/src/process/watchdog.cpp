#include "ddp/launcher/process/watchdog.h"

#include "ddp/common/fd_io.h"

#include "ddp/launcher/base/signal_names.h"

#include "ddp/launcher/process/shm_segments.h"
#include "ddp/launcher/process/spawn.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <set>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace ddp::launcher {

namespace {

// Messages are one int: a group id (> 1) that started, its negative when it
// ended, or this (never a group id: only spawns > 1 are sent).
constexpr int kKeepRunDir = 1;

constexpr char kName[] = "ddp-watchdog";

// Only the socket stays open (as fd 3; fds 0-2 become /dev/null): the
// watchdog must not keep the launcher's output pipe, terminal or listening
// sockets alive. Returns the socket's new fd.
int close_other_fds(int keep) {
  const int devnull = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd)
    if (devnull >= 0 && devnull != fd) ::dup2(devnull, fd);
  if (keep != 3) ::dup2(keep, 3);
  if (::syscall(SYS_close_range, 4U, ~0U, 0U) != 0)
    for (int fd = 4; fd < 1024; ++fd) ::close(fd);
  return 3;
}

// Overwrites this process's argv block (our copy after fork) with `name`,
// so /proc/self/cmdline reads "name" and NULs. The block's bounds are
// fields 48 and 49 of /proc/self/stat (Linux 3.5+); nothing changes when
// they cannot be read.
void set_command_line(const char* name) {
  char buf[4096];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return;
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the name may hold spaces and ')'
  if (!p) return;
  unsigned long long arg_start = 0, arg_end = 0;
  // After ") " comes field 3; fields 48 and 49 are the argv block's bounds.
  for (int field = 2; field < 49 && p; ++field) {
    p = std::strchr(p + 1, ' ');
    if (p && field + 1 == 48) arg_start = std::strtoull(p + 1, nullptr, 10);
    if (p && field + 1 == 49) arg_end = std::strtoull(p + 1, nullptr, 10);
  }
  if (arg_start == 0 || arg_end <= arg_start) return;
  char* block = reinterpret_cast<char*>(static_cast<uintptr_t>(arg_start));
  const size_t len = static_cast<size_t>(arg_end - arg_start);
  std::memset(block, 0, len);
  std::memcpy(block, name, std::min(len - 1, std::strlen(name)));
}

// Waits until every one of `pids` (group leaders just sent SIGKILL) has
// exited, at most Watchdog::kCleanupWaitS: a worker killed inside
// shm_open(O_CREAT) may still finish that call, and its segment must be
// there before we look. A pidfd (opened before the kill, so a reused pid
// is never waited for) is readable once the process is gone.
void wait_dead(const std::vector<int>& pidfds) {
  std::vector<pollfd> left;
  for (int fd : pidfds) left.push_back(pollfd{fd, POLLIN, 0});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(Watchdog::kCleanupWaitS);
  while (!left.empty()) {
    const int r = ddp::fd::poll_until(left.data(), left.size(),
                                      std::chrono::time_point_cast<std::chrono::steady_clock::duration>(deadline));
    if (r <= 0) return;  // the deadline passed, or poll failed
    left.erase(std::remove_if(left.begin(), left.end(), [](const pollfd& p) { return p.revents != 0; }), left.end());
  }
}

[[noreturn]] void watch(int fd, const std::string& run_dir) {
  ::prctl(PR_SET_NAME, kName);
  set_command_line(kName);
  fd = close_other_fds(fd);
  std::set<pid_t> groups;
  bool keep_dir = false;
  for (;;) {
    int v = 0;
    const ssize_t n = ddp::fd::retry_eintr([&] { return ::recv(fd, &v, sizeof(v), MSG_WAITALL); });
    if (n != static_cast<ssize_t>(sizeof(v))) break;  // EOF: the launcher is gone
    if (v > 1) groups.insert(v);             // a group started
    else if (v < -1) groups.erase(-v);       // a group ended
    else if (v == kKeepRunDir) keep_dir = true;
  }
  std::vector<int> pidfds;
  for (pid_t g : groups) {
    const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, g, 0));
    if (pfd >= 0) pidfds.push_back(pfd);
  }
  for (pid_t g : groups) ::kill(-g, SIGKILL);
  wait_dead(pidfds);
  remove_worker_segments(groups);
  std::error_code ec;
  if (!keep_dir) std::filesystem::remove_all(run_dir, ec);
  ::_exit(0);
}

}  // namespace

Watchdog::Watchdog(const std::string& run_dir) : run_dir_(run_dir) { start(); }

void Watchdog::start() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw SpawnError(std::string("socketpair failed: ") + std::strerror(errno), errno, true);
  // A plain fork: the child runs C++ (a set, the directory removal), which a
  // vfork child may not; the launcher has no threads, so this is safe. (An
  // exec'd watchdog was measured slower: its start competes with the workers'.)
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(sv[0]);
    ::setsid();  // out of the launcher's process group: a kill(-pgid) aimed at the launcher leaves it be
    watch(sv[1], run_dir_);
  }
  ::close(sv[1]);
  if (pid < 0) {
    const int e = errno;
    ::close(sv[0]);
    throw SpawnError(std::string("fork failed: ") + std::strerror(e), e, true);
  }
  pid_ = pid;
  fd_ = sv[0];
}

void Watchdog::replace() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  pid_ = -1;
  finished_ = false;
  start();
}

void Watchdog::finish() {
  // EOF for the watchdog; its end of the socket closes when it exits.
  if (fd_ >= 0 && !finished_) ::shutdown(fd_, SHUT_WR);
  finished_ = true;
}

Watchdog::~Watchdog() {
  if (fd_ < 0) return;
  finish();
  pollfd p{fd_, POLLIN, 0};
  const int waited = ::poll(&p, 1, static_cast<int>(kCleanupWaitS * 1000));
  ::close(fd_);
  // Exiting (its files are closed before it becomes a zombie): a blocking
  // wait is short. One that did not answer (stopped) is left, not waited for.
  int status = 0;
  if (pid_ > 0)
    ddp::fd::retry_eintr([&] { return ::waitpid(pid_, &status, waited > 0 ? 0 : WNOHANG); });
}

void Watchdog::add_group(pid_t pgid) { send(pgid); }
void Watchdog::remove_group(pid_t pgid) { send(-pgid); }
void Watchdog::keep_run_dir() { send(kKeepRunDir); }

void Watchdog::send(int value) {
  // Never blocks and never raises SIGPIPE: a watchdog that died (someone
  // killed it) costs the cleanup after a SIGKILL, not the job.
  if (fd_ >= 0 && !finished_) ::send(fd_, &value, sizeof(value), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Someone killed the watchdog (`pkill -f` of an older launcher's command
// line, a kill of the wrong pid): without one, a SIGKILL of the launcher
// would leave its workers' children and run directory behind. A new one
// learns the groups alive now; said once per death, as a warning.
std::string Watchdog::replace_dead(int status, const std::vector<pid_t>& groups) {
  const pid_t old = pid_;
  const std::string how = WIFSIGNALED(status) ? "died of " + signal_name(WTERMSIG(status))
                                              : "exited with code " + std::to_string(WEXITSTATUS(status));
  std::string line = "ddp-launch: warning: the launcher's watchdog (pid " + std::to_string(old) + ") " + how;
  try {
    replace();
    for (pid_t g : groups) add_group(g);
    return line + "; started a new one (pid " + std::to_string(pid_) +
           "), which cleans up after the workers if the launcher is killed";
  } catch (const SpawnError& e) {
    return line + "; a new one could not be started (" + e.what() +
           "): if the launcher is now SIGKILLed, its workers' children and run directory are left behind";
  }
}

}  // namespace ddp::launcher
