#include "ddp/launcher/watchdog.h"

#include "ddp/launcher/spawn.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <set>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ddp::launcher {

namespace {

// Messages are one int: a group id (> 1) that started, its negative when it
// ended, or this (never a group id: only spawns > 1 are sent).
constexpr int kKeepRunDir = 1;

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

[[noreturn]] void watch(int fd, const std::string& run_dir) {
  ::prctl(PR_SET_NAME, "ddp-watchdog");
  fd = close_other_fds(fd);
  std::set<pid_t> groups;
  bool keep_dir = false;
  for (;;) {
    int v = 0;
    ssize_t n = ::recv(fd, &v, sizeof(v), MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof(v))) break;  // EOF: the launcher is gone
    if (v > 1) groups.insert(v);             // a group started
    else if (v < -1) groups.erase(-v);       // a group ended
    else if (v == kKeepRunDir) keep_dir = true;
  }
  for (pid_t g : groups) ::kill(-g, SIGKILL);
  std::error_code ec;
  if (!keep_dir) std::filesystem::remove_all(run_dir, ec);
  ::_exit(0);
}

}  // namespace

Watchdog::Watchdog(const std::string& run_dir) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw SpawnError(std::string("socketpair failed: ") + std::strerror(errno), errno, true);
  // A plain fork: the child runs C++ (a set, the directory removal), which a
  // vfork child may not; the launcher has no threads, so this is safe. (An
  // exec'd watchdog was measured slower: its start competes with the workers'.)
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(sv[0]);
    ::setsid();  // out of the launcher's process group: a kill(-pgid) aimed at the launcher leaves it be
    watch(sv[1], run_dir);
  }
  ::close(sv[1]);
  if (pid_ < 0) {
    const int e = errno;
    ::close(sv[0]);
    throw SpawnError(std::string("fork failed: ") + std::strerror(e), e, true);
  }
  fd_ = sv[0];
}

Watchdog::~Watchdog() {
  if (fd_ >= 0) ::close(fd_);
}

void Watchdog::add_group(pid_t pgid) { send(pgid); }
void Watchdog::remove_group(pid_t pgid) { send(-pgid); }
void Watchdog::keep_run_dir() { send(kKeepRunDir); }

void Watchdog::send(int value) {
  // Never blocks and never raises SIGPIPE: a watchdog that died (someone
  // killed it) costs the cleanup after a SIGKILL, not the job.
  ::send(fd_, &value, sizeof(value), MSG_NOSIGNAL | MSG_DONTWAIT);
}

}  // namespace ddp::launcher
