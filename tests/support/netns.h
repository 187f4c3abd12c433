#pragma once
// Test hosts on one machine: N network namespaces ("nodes", "pods") joined
// by a bridge in a namespace of its own, each with one interface eth0 and
// its own address 10.<a>.<b>.<i+1>/24, loopback up. Needs root and
// iproute2 (`ip netns`); unavailable_reason() says why not, and the test
// skips. The namespaces are named ddptest-<pid>-<n>-*, removed on
// destruction; ones left by a test process that died are removed by the
// next NetNodes of any test.

#include <optional>
#include <string>
#include <vector>

namespace ddp::test {

class NetNodes {
 public:
  explicit NetNodes(int count);
  ~NetNodes();
  NetNodes(const NetNodes&) = delete;
  NetNodes& operator=(const NetNodes&) = delete;

  // Why namespaces cannot be made here, or nullopt when they can.
  static std::optional<std::string> unavailable_reason();

  int size() const { return static_cast<int>(names_.size()); }
  const std::string& name(int i) const { return names_.at(i); }
  std::string address(int i) const;  // e.g. 10.93.0.2
  // argv run inside node i: ip netns exec <name> argv...
  std::vector<std::string> exec(int i, const std::vector<std::string>& argv) const;

 private:
  std::string prefix_, bridge_ns_, subnet_;
  std::vector<std::string> names_;
};

}  // namespace ddp::test
