#include "ddp/launcher/watch/file_timer_server.h"

#include "ddp/common/fd_io.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::launcher {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

std::string mode_text(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

FileTimerServer::FileTimerServer(std::string path)
    : path_(std::move(path)), lines_(PIPE_BUF), table_(kMaxScopes) {
  const std::string what = "the file timer's pipe " + path_ + " (TORCHELASTIC_ENABLE_FILE_TIMER=1)";
  const std::string elsewhere = "set TORCHELASTIC_TIMER_FILE to a path in a directory only you can write";
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode))
      throw std::runtime_error(what + ": the path exists and is not a named pipe; remove it or set "
                               "TORCHELASTIC_TIMER_FILE to another path");
    // Another user's pipe is someone who could read the workers' requests
    // or write their own: refused and left alone (torchrun, as root, would
    // delete it and make its own; one who could plant it could swap ours
    // again before the workers open it, so recreating would not make the
    // directory safe).
    if (st.st_uid != ::geteuid())
      throw std::runtime_error(what + ": a named pipe owned by uid " + std::to_string(st.st_uid) + ", mode " +
                               mode_text(st.st_mode) + ", is there, not one this user (uid " +
                               std::to_string(::geteuid()) + ") made: its owner could read or write the "
                               "workers' timer requests, so it is neither used nor removed; remove it if it is "
                               "stale, or " + elsewhere);
    ::unlink(path_.c_str());  // our old run's pipe, as torchrun replaces it
  }
  if (::mkfifo(path_.c_str(), 0600) != 0)
    throw std::runtime_error("cannot create " + what + ": " + std::strerror(errno) +
                             (errno == EEXIST ? "; something was made there again at once: " + elsewhere
                                              : std::string("; set TORCHELASTIC_TIMER_FILE to a path in a writable directory")));
  // Opened by path, so checked on the fds: what we opened must be the pipe
  // just made (this user's, nobody else's bits), not one swapped in since.
  rd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (rd_ >= 0) wr_ = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (rd_ < 0 || wr_ < 0 || ::fstat(rd_, &st) != 0) {
    const int e = errno;
    if (rd_ >= 0) ::close(rd_);
    ::unlink(path_.c_str());
    throw std::runtime_error("cannot open " + what + ": " + std::strerror(e));
  }
  struct stat wst {};
  if (!S_ISFIFO(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0 || ::fstat(wr_, &wst) != 0 ||
      wst.st_ino != st.st_ino || wst.st_dev != st.st_dev) {
    ::close(wr_);
    ::close(rd_);
    throw std::runtime_error(what + ": the pipe was replaced between its creation and its opening (now owned by uid " +
                             std::to_string(st.st_uid) + ", mode " + mode_text(st.st_mode) +
                             "): another user can write that directory; " + elsewhere);
  }
  dev_ = st.st_dev;
  ino_ = st.st_ino;
}

FileTimerServer::~FileTimerServer() {
  ::close(wr_);
  ::close(rd_);
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) ::unlink(path_.c_str());
}

std::string FileTimerServer::refuse(const std::string& why) {
  if (warned_) return "";
  warned_ = true;
  return "ddp-launch: warning: ignored a file-timer request on " + path_ + ": " + why +
         "; further bad requests are ignored without a warning";
}

std::string FileTimerServer::read(double now, const std::function<bool(pid_t)>& accept) {
  std::string warning;
  auto note = [&](const std::string& why) {
    const std::string w = refuse(why);
    if (!w.empty()) warning = w;
  };
  char buf[65536];
  for (size_t total = 0; total < kMaxReadBytes;) {
    const ssize_t n = ddp::fd::read_some(rd_, buf, sizeof(buf));
    if (n <= 0) break;  // EAGAIN: drained (never 0: the launcher holds a write end)
    total += static_cast<size_t>(n);
    for (const LineSplitter::Line& line : lines_.feed(buf, static_cast<size_t>(n))) {
      if (line.too_long) {
        note("a line longer than " + std::to_string(PIPE_BUF) + " bytes, starting '" + line.text + "'");
        continue;
      }
      if (line.text.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::string why;
      const std::optional<TimerRequest> r = parse_timer_request(line.text, why);
      if (!r) {
        note(why);
      } else if (!r->release() && !accept(r->pid)) {
        note("pid " + std::to_string(r->pid) + " (scope '" + r->scope_id +
             "') is no process of this launcher's workers; only they and their children can be signalled");
      } else if (!table_.apply(*r, now)) {
        note("already " + std::to_string(kMaxScopes) + " timer scopes held; scope '" + r->scope_id + "' of pid " +
             std::to_string(r->pid) + " is not timed");
      }
    }
  }
  return warning;
}

int FileTimerServer::ms_to_next_expiry(double now) const {
  const std::optional<double> next = table_.next_expiration();
  if (!next) return -1;
  const double ms = std::ceil((*next - now) * 1000.0);
  return static_cast<int>(std::clamp(ms, 0.0, 86400000.0));
}

}  // namespace ddp::launcher
