#pragma once
// Signals by name, as Python's signal module spells them (torchrun looks
// --signals_to_handle up there): the default list, parsing a list, and the
// name of a number. Pure; a leaf every layer may use.

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

// "SIGSEGV" for 11; "signal N" when unknown.
std::string signal_name(int sig);

}  // namespace ddp::launcher
