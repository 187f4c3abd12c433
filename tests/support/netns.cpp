#include "netns.h"

#include <atomic>
#include <csignal>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include "test_support.h"

namespace ddp::test {

namespace {

void ip(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run(argv, {}, 30);
  if (r.exit_code != 0) {
    std::ostringstream cmd;
    for (const auto& a : argv) cmd << a << " ";
    throw std::runtime_error("netns setup: `" + cmd.str() + "` failed: " + r.output);
  }
}

// Namespaces of test processes that no longer exist (killed mid-test).
void remove_stale() {
  auto r = run({"ip", "netns", "list"}, {}, 30);
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind("ddptest-", 0) != 0) continue;
    const pid_t pid = static_cast<pid_t>(std::atoi(name.c_str() + 8));
    if (pid > 0 && ::kill(pid, 0) != 0) run({"ip", "netns", "delete", name}, {}, 30);
  }
}

}  // namespace

std::optional<std::string> NetNodes::unavailable_reason() {
  if (::geteuid() != 0) return std::string("network namespaces need root (ip netns add)");
  if (run({"ip", "-V"}, {}, 30).exit_code != 0) return std::string("iproute2 (ip) is not installed");
  const std::string probe = "ddptest-" + std::to_string(::getpid()) + "-probe";
  auto r = run({"ip", "netns", "add", probe}, {}, 30);
  if (r.exit_code != 0) return "cannot create a network namespace here: " + r.output;
  run({"ip", "netns", "delete", probe}, {}, 30);
  return std::nullopt;
}

NetNodes::NetNodes(int count) {
  static std::atomic<int> serial{0};
  const int n = serial++;
  remove_stale();
  prefix_ = "ddptest-" + std::to_string(::getpid()) + "-" + std::to_string(n);
  // A subnet per instance, so that two of them never share addresses even
  // if a bridge were ever shared.
  subnet_ = "10." + std::to_string(64 + (::getpid() % 128)) + "." + std::to_string(n % 250);
  bridge_ns_ = prefix_ + "-br";
  try {
    ip({"netns", "add", bridge_ns_});
    ip({"-n", bridge_ns_, "link", "add", "br0", "type", "bridge"});
    ip({"-n", bridge_ns_, "link", "set", "br0", "up"});
    for (int i = 0; i < count; ++i) {
      const std::string ns = prefix_ + "-" + std::to_string(i);
      ip({"netns", "add", ns});
      names_.push_back(ns);
      const std::string port = "p" + std::to_string(i);
      ip({"link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", bridge_ns_});
      ip({"-n", bridge_ns_, "link", "set", port, "master", "br0"});
      ip({"-n", bridge_ns_, "link", "set", port, "up"});
      ip({"-n", ns, "addr", "add", address(i) + "/24", "dev", "eth0"});
      ip({"-n", ns, "link", "set", "eth0", "up"});
      ip({"-n", ns, "link", "set", "lo", "up"});
    }
  } catch (...) {
    for (const auto& ns : names_) run({"ip", "netns", "delete", ns}, {}, 30);
    run({"ip", "netns", "delete", bridge_ns_}, {}, 30);
    throw;
  }
}

NetNodes::~NetNodes() {
  for (const auto& ns : names_) run({"ip", "netns", "delete", ns}, {}, 30);
  run({"ip", "netns", "delete", bridge_ns_}, {}, 30);
}

std::string NetNodes::address(int i) const { return subnet_ + "." + std::to_string(i + 1); }

std::vector<std::string> NetNodes::exec(int i, const std::vector<std::string>& argv) const {
  std::vector<std::string> out{"ip", "netns", "exec", name(i)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace ddp::test
