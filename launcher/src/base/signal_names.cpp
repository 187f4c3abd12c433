#include "ddp/launcher/base/signal_names.h"

#include <algorithm>
#include <csignal>
#include <stdexcept>

namespace ddp::launcher {

namespace {

struct NamedSignal {
  const char* name;
  int number;
};

// Python's signal module on Linux, aliases included (torchrun resolves the
// names with getattr(signal, name)). SIGRTMIN/SIGRTMAX are functions in
// glibc, added below. The first name of a number is the one signal_name
// prints, as glibc's sigabbrev_np does (SIGPOLL before SIGIO); the table, not
// sigabbrev_np (glibc 2.32), so that the wheel runs on glibc 2.28.
constexpr NamedSignal kNames[] = {
    {"SIGHUP", SIGHUP},     {"SIGINT", SIGINT},       {"SIGQUIT", SIGQUIT},   {"SIGILL", SIGILL},
    {"SIGTRAP", SIGTRAP},   {"SIGABRT", SIGABRT},     {"SIGIOT", SIGIOT},     {"SIGBUS", SIGBUS},
    {"SIGFPE", SIGFPE},     {"SIGKILL", SIGKILL},     {"SIGUSR1", SIGUSR1},   {"SIGSEGV", SIGSEGV},
    {"SIGUSR2", SIGUSR2},   {"SIGPIPE", SIGPIPE},     {"SIGALRM", SIGALRM},   {"SIGTERM", SIGTERM},
    {"SIGSTKFLT", SIGSTKFLT}, {"SIGCHLD", SIGCHLD},   {"SIGCLD", SIGCHLD},    {"SIGCONT", SIGCONT},
    {"SIGSTOP", SIGSTOP},   {"SIGTSTP", SIGTSTP},     {"SIGTTIN", SIGTTIN},   {"SIGTTOU", SIGTTOU},
    {"SIGURG", SIGURG},     {"SIGXCPU", SIGXCPU},     {"SIGXFSZ", SIGXFSZ},   {"SIGVTALRM", SIGVTALRM},
    {"SIGPROF", SIGPROF},   {"SIGWINCH", SIGWINCH},   {"SIGPOLL", SIGPOLL},   {"SIGIO", SIGIO},
    {"SIGPWR", SIGPWR},     {"SIGSYS", SIGSYS},
};

int signal_by_name(const std::string& name) {
  for (const NamedSignal& s : kNames)
    if (name == s.name) return s.number;
  if (name == "SIGRTMIN") return SIGRTMIN;
  if (name == "SIGRTMAX") return SIGRTMAX;
  return 0;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

const std::vector<int>& default_handled_signals() {
  static const std::vector<int> d{SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  return d;
}

std::vector<int> parse_signal_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const std::string head = what + " '" + text + "': ";
    if (item.empty())
      throw std::invalid_argument(head + "empty signal name; give names separated by commas, e.g. "
                                         "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1");
    const int sig = signal_by_name(item);
    if (sig == 0)
      throw std::invalid_argument(head + "'" + item + "' is not a signal name; write it as Python's signal module "
                                         "does, e.g. SIGUSR1");
    if (sig == SIGKILL || sig == SIGSTOP)
      throw std::invalid_argument(head + item + " cannot be caught by any process; leave it out");
    if (sig == SIGCHLD || sig == SIGPIPE)
      throw std::invalid_argument(head + item + " is the launcher's own (" +
                                  (sig == SIGCHLD ? "it sees its workers exit by it" : "it sees a console that went away by it") +
                                  "); leave it out");
    if (std::find(out.begin(), out.end(), sig) == out.end()) out.push_back(sig);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string signal_list_text(const std::vector<int>& signals) {
  std::string out;
  for (int s : signals) out += (out.empty() ? "" : ",") + signal_name(s);
  return out;
}

std::string signal_name(int sig) {
  // Real-time signals have no abbreviation; name them as Python would accept.
  if (sig == SIGRTMIN) return "SIGRTMIN";
  if (sig == SIGRTMAX) return "SIGRTMAX";
  for (const NamedSignal& s : kNames)
    if (sig == s.number) return s.name;
  return "signal " + std::to_string(sig);
}

}  // namespace ddp::launcher
