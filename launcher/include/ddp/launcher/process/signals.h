#pragma once
// The launcher's signals, handled synchronously: SIGCHLD and the signals it
// forwards (--signals_to_handle, by default SIGTERM, SIGINT, SIGHUP, SIGQUIT)
// are blocked from the start and read from a signalfd, so none is lost
// between a check and a wait. A signal not in the list keeps its default
// action (SIGUSR1 ends the launcher, as in torchrun; its workers then die by
// their death signal), but for SIGUSR2: unless the list names it, it is
// caught too, as the request for a live stack dump (stack_dump.h) that
// leaves the job running. The original mask is kept so children restore it
// before exec (a blocked mask survives exec and would make workers deaf to
// SIGTERM).

#include "ddp/launcher/base/signal_names.h"

#include <csignal>
#include <string>
#include <vector>

namespace ddp::launcher {

class SignalChannel {
 public:
  // Blocks SIGCHLD and `handled` and opens the signalfd.
  explicit SignalChannel(const std::vector<int>& handled = default_handled_signals());
  // Closes it and restores the original mask; the dump request (SIGUSR2)
  // stays ignored, so one that comes while the launcher exits is no death.
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_; }
  const sigset_t& original_mask() const { return original_; }
  // Every signal pending on the fd right now (non-blocking).
  std::vector<int> drain();

  // Whether a signal read from a channel is one to forward: every one but
  // SIGCHLD, since a channel carries only SIGCHLD and its handled signals
  // (check is_dump_request first).
  static bool is_forwarded(int sig) { return sig != SIGCHLD; }
  // SIGUSR2 when `handled` does not name it: dump every rank's stacks, forward nothing.
  bool is_dump_request(int sig) const { return sig == dump_signal_; }

 private:
  int fd_ = -1;
  sigset_t original_;
  int dump_signal_ = 0;
};

}  // namespace ddp::launcher
