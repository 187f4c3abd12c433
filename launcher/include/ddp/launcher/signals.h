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

#include <csignal>
#include <string>
#include <vector>

namespace ddp::launcher {

// torchrun's default --signals_to_handle: SIGTERM, SIGINT, SIGHUP, SIGQUIT.
const std::vector<int>& default_handled_signals();
constexpr const char* kDefaultSignalsToHandle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";

// --signals_to_handle "SIGTERM,SIGUSR1": names as Python's signal module
// spells them (torchrun looks them up there), blanks around a name ignored,
// each kept once. `what` names the option as given. Throws
// std::invalid_argument naming the value: an unknown name, an empty item, or
// a signal the launcher cannot take over (SIGKILL and SIGSTOP cannot be
// caught; SIGCHLD and SIGPIPE are its own).
std::vector<int> parse_signal_list(const std::string& text, const std::string& what);
// The list as workers see it in TORCHELASTIC_SIGNALS_TO_HANDLE: "SIGTERM,SIGUSR1".
std::string signal_list_text(const std::vector<int>& signals);

class SignalChannel {
 public:
  // Blocks SIGCHLD and `handled` and opens the signalfd.
  explicit SignalChannel(const std::vector<int>& handled = default_handled_signals());
  ~SignalChannel();  // closes it and restores the original mask
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

// "SIGSEGV" for 11; "signal N" when unknown.
std::string signal_name(int sig);

}  // namespace ddp::launcher
