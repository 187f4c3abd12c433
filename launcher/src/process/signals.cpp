#include "ddp/launcher/process/signals.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace ddp::launcher {

SignalChannel::SignalChannel(const std::vector<int>& handled) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : handled) sigaddset(&set, s);
  // The live stack dump's request, unless it is one to forward (Slurm's warning signal).
  if (std::find(handled.begin(), handled.end(), SIGUSR2) == handled.end()) {
    dump_signal_ = SIGUSR2;
    sigaddset(&set, SIGUSR2);
  }
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

}  // namespace ddp::launcher
