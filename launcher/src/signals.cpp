#include "ddp/launcher/signals.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace ddp::launcher {

namespace {
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
}

SignalChannel::SignalChannel() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : kForwarded) sigaddset(&set, s);
  if (::sigprocmask(SIG_BLOCK, &set, &original_) != 0)
    throw std::runtime_error(std::string("sigprocmask failed: ") + std::strerror(errno));
  fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("signalfd failed: ") + std::strerror(errno));
}

SignalChannel::~SignalChannel() {
  if (fd_ >= 0) ::close(fd_);
  ::sigprocmask(SIG_SETMASK, &original_, nullptr);
}

std::vector<int> SignalChannel::drain() {
  std::vector<int> out;
  signalfd_siginfo info;
  for (;;) {
    ssize_t n = ::read(fd_, &info, sizeof(info));
    if (n == static_cast<ssize_t>(sizeof(info))) {
      out.push_back(static_cast<int>(info.ssi_signo));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return out;  // EAGAIN: nothing more pending
  }
}

bool SignalChannel::is_forwarded(int sig) {
  for (int s : kForwarded)
    if (s == sig) return true;
  return false;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

}  // namespace ddp::launcher
