#pragma once
// The launcher's signals, handled synchronously: SIGCHLD and the signals it
// forwards (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are blocked from the start and
// read from a signalfd, so none is lost between a check and a wait. The
// original mask is kept so children restore it before exec (a blocked mask
// survives exec and would make workers deaf to SIGTERM).

#include <csignal>
#include <string>
#include <vector>

namespace ddp::launcher {

class SignalChannel {
 public:
  SignalChannel();   // blocks the signals and opens the signalfd
  ~SignalChannel();  // closes it and restores the original mask
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_; }
  const sigset_t& original_mask() const { return original_; }
  // Every signal pending on the fd right now (non-blocking).
  std::vector<int> drain();

  static bool is_forwarded(int sig);

 private:
  int fd_ = -1;
  sigset_t original_;
};

// "SIGSEGV" for 11; "signal N" when unknown.
std::string signal_name(int sig);

}  // namespace ddp::launcher
