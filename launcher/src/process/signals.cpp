#include "ddp/launcher/process/signals.h"

#include "ddp/common/fd_io.h"

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
  // Blocked, they are read from the fd whatever their disposition; but a
  // disposition of SIG_IGN survives exec, so a launcher started as a
  // background job of a script (SIGINT and SIGQUIT ignored) would pass it to
  // its workers, deaf to the SIGINT it forwards (KeyboardInterrupt handlers
  // never run). As torchrun's handlers do, default them: the workers get
  // default dispositions, and SIGCHLD is never auto-reaped.
  for (int s = 1; s < NSIG; ++s)
    if (sigismember(&set, s) == 1) ::signal(s, SIG_DFL);
  fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("signalfd failed: ") + std::strerror(errno));
}

SignalChannel::~SignalChannel() {
  if (fd_ >= 0) ::close(fd_);
  // A live dump's request that comes after the last loop read the channel
  // (or after this, while the launcher exits) asks for nothing any more:
  // unblocked at its default, it would end the launcher after a successful
  // run (exit 140). Ignored from here on: pending ones are dropped too.
  if (dump_signal_) ::signal(dump_signal_, SIG_IGN);
  ::sigprocmask(SIG_SETMASK, &original_, nullptr);
}

std::vector<int> SignalChannel::drain() {
  std::vector<int> out;
  signalfd_siginfo info;
  for (;;) {
    const ssize_t n = ddp::fd::read_some(fd_, &info, sizeof(info));
    if (n == static_cast<ssize_t>(sizeof(info))) {
      out.push_back(static_cast<int>(info.ssi_signo));
      continue;
    }
    return out;  // EAGAIN: nothing more pending
  }
}

}  // namespace ddp::launcher
