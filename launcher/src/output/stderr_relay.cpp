#include "ddp/launcher/output/stderr_relay.h"

#include "ddp/common/fd_io.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

namespace ddp::launcher {

namespace {

constexpr size_t kReadChunk = 64 * 1024;
// As the tee's: a chatty worker yields to the event loop after this many
// reads; at the end, a writer that escaped the teardown is cut off.
constexpr int kReadsPerPump = 16;
constexpr int kReadsAtEnd = 4096;

// Blocks sig; true when it was not blocked before (so ours to unblock).
bool block(int sig) {
  sigset_t one, old;
  sigemptyset(&one);
  sigaddset(&one, sig);
  ::pthread_sigmask(SIG_BLOCK, &one, &old);
  return !sigismember(&old, sig);
}

void unblock(int sig) {
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  const timespec zero{0, 0};
  while (::sigtimedwait(&one, nullptr, &zero) == sig) {  // a pending one would act once unblocked
  }
  ::pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
}

}  // namespace

StderrRelay::StderrRelay(Sink sink) : sink_(std::move(sink)) { blocked_pipe_ = block(SIGPIPE); }

StderrRelay::~StderrRelay() {
  for (Stream& s : streams_) close_fd(s.read_fd);
  close_fd(winch_fd_);
  if (blocked_winch_) unblock(SIGWINCH);
  if (blocked_pipe_) unblock(SIGPIPE);
}

void StderrRelay::close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int StderrRelay::make_pty(int console_fd, int& master) {
  master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return -1;
  char name[128];
  int slave = -1;
  if (::grantpt(master) == 0 && ::unlockpt(master) == 0 && ::ptsname_r(master, name, sizeof name) == 0)
    slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) {
    const int e = errno;
    close_fd(master);
    errno = e;
    return -1;
  }
  // The terminal's settings, but bytes pass through raw: the real terminal
  // does the output processing, once.
  termios t{};
  if (::tcgetattr(console_fd, &t) != 0) ::tcgetattr(slave, &t);
  t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
  ::tcsetattr(slave, TCSANOW, &t);
  winsize ws{};
  if (::ioctl(console_fd, TIOCGWINSZ, &ws) == 0) ::ioctl(master, TIOCSWINSZ, &ws);
  if (winch_fd_ < 0) {
    blocked_winch_ = block(SIGWINCH);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGWINCH);
    winch_fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);  // -1: the size is not followed, all else works
  }
  return slave;
}

int StderrRelay::add(int local_rank, int console_fd) {
  Stream s;
  s.local_rank = local_rank;
  s.console_fd = console_fd;
  if (console_fd >= 0 && console_is_tty_ < 0) console_is_tty_ = ::isatty(console_fd) ? 1 : 0;
  int worker_end = -1;
  const char* what = "a pipe";
  if (console_fd >= 0 && console_is_tty_ == 1) {
    what = "a pseudo-terminal";
    worker_end = make_pty(console_fd, s.read_fd);
    s.pty = true;
  } else {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      s.read_fd = p[0];
      worker_end = p[1];
    }
  }
  if (worker_end < 0) {
    if (!warned_) {
      warned_ = true;
      warning_ = std::string("ddp-launch: warning: cannot make ") + what + " for the stderr of local_rank " +
                 std::to_string(local_rank) + ": " + std::strerror(errno) +
                 "; such workers write to the launcher's stderr themselves, and a failure report cannot quote it";
    }
    return -1;
  }
  // Only our end is non-blocking: the worker's stderr blocks as usual.
  ::fcntl(s.read_fd, F_SETFL, ::fcntl(s.read_fd, F_GETFL) | O_NONBLOCK);
  streams_.push_back(s);
  return worker_end;
}

std::vector<int> StderrRelay::fds() const {
  std::vector<int> out;
  for (const Stream& s : streams_)
    if (s.read_fd >= 0) out.push_back(s.read_fd);
  if (winch_fd_ >= 0) out.push_back(winch_fd_);
  return out;
}

void StderrRelay::pump(const pollfd* polled, size_t n) {
  size_t i = 0;
  for (Stream& s : streams_) {
    if (s.read_fd < 0) continue;
    if (i >= n || polled[i].fd != s.read_fd) return;  // not what fds() gave: read nothing rather than guess
    if (polled[i++].revents != 0) read_stream(s, false);
  }
  if (winch_fd_ >= 0 && i < n && polled[i].fd == winch_fd_ && polled[i].revents != 0) follow_window_size();
}

void StderrRelay::finish() {
  for (Stream& s : streams_)
    if (s.read_fd >= 0) read_stream(s, true);
}

std::string StderrRelay::take_warning() {
  std::string w;
  w.swap(warning_);
  return w;
}

void StderrRelay::follow_window_size() {
  signalfd_siginfo info;
  bool changed = false;
  while (::read(winch_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) changed = true;
  if (!changed) return;
  for (Stream& s : streams_) {
    winsize ws{};
    if (s.pty && s.read_fd >= 0 && ::ioctl(s.console_fd, TIOCGWINSZ, &ws) == 0) ::ioctl(s.read_fd, TIOCSWINSZ, &ws);
  }
}

void StderrRelay::read_stream(Stream& s, bool at_end) {
  static thread_local std::vector<char> buf(kReadChunk);
  for (int reads = 0; reads < (at_end ? kReadsAtEnd : kReadsPerPump); ++reads) {
    const ssize_t n = ddp::fd::read_some(s.read_fd, buf.data(), buf.size());
    if (n < 0 && errno == EAGAIN) return;  // nothing more for now (or a writer still alive at the end)
    if (n <= 0) {  // EOF; a pty master's EIO: every slave fd is closed and its bytes are read
      close_fd(s.read_fd);
      return;
    }
    if (s.console_fd >= 0) to_console(s.console_fd, buf.data(), static_cast<size_t>(n));
    if (sink_) sink_(s.local_rank, buf.data(), static_cast<size_t>(n));
  }
}

void StderrRelay::to_console(int fd, const char* data, size_t n) {
  if (console_gone_) return;
  // A console someone made non-blocking: wait until it takes more.
  if (ddp::fd::write_all(fd, data, n, ddp::fd::WhenFull::wait).bytes == n) return;
  // EPIPE (the reader went away) or a broken console: the tails keep going.
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  const timespec zero{0, 0};
  while (::sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
  console_gone_ = true;
}

}  // namespace ddp::launcher
