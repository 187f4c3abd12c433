#pragma once
// A real etcd cluster for tests (Debian's etcd-server, 3.4): N members,
// each a process of the test, on free loopback ports or one per network
// namespace of a NetNodes (netns.h). Short raft timers (heartbeat 50 ms,
// election 500 ms), so an election after a kill takes about a second.
// Members are killed on destruction; their data lives in a TempDir.
// unavailable_reason() says why a test must skip (etcd not installed).

#include "netns.h"
#include "test_support.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp::test {

class EtcdCluster {
 public:
  // Why no cluster can start here (no etcd, no etcdctl), or nullopt.
  static std::optional<std::string> unavailable_reason();

  // n members on 127.0.0.1, free ports.
  explicit EtcdCluster(int n);
  // Member i in namespace i of nodes (i < n), client port 2379.
  EtcdCluster(const NetNodes& nodes, int n);
  ~EtcdCluster();

  int size() const { return static_cast<int>(members_.size()); }
  std::string endpoint(int i) const;  // host:port of member i's clients
  std::string endpoints() const;      // every member's, comma-separated
  void kill(int i);                   // SIGKILL
  void restart(int i);                // the same member again, its data kept
  // Index of the member the live members name as their leader; -1 when
  // none answers within timeout_s.
  int leader(double timeout_s = 10);
  // The member's log (etcd's own output).
  std::string log(int i) const;

 private:
  struct Member {
    std::string name, host;
    int client_port = 0, peer_port = 0;
    std::vector<std::string> exec;  // prefix: `ip netns exec NS` or nothing
    std::unique_ptr<Proc> proc;
  };
  void start(int i);
  void wait_ready();
  std::vector<std::string> in(int i, std::vector<std::string> argv) const;

  TempDir dir_;
  std::vector<Member> members_;
  std::string initial_cluster_;
};

}  // namespace ddp::test
