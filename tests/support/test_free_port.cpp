// free_port() (test_support.h): the port a test hands to a server it starts
// later. Between the pick and that bind, the port must not be one the kernel
// gives any other process on the machine for an outgoing connection.
#include "test_support.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <netinet/in.h>
#include <set>
#include <sys/socket.h>
#include <unistd.h>

namespace {

bool listen_on_any(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("free_port: outside the kernel's ephemeral range and Slurm's job ports, listenable, never twice") {
  int lo = 32768, hi = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi;
  std::set<int> seen;
  for (int i = 0; i < 200; ++i) {
    const int port = ddp::test::free_port();
    INFO("port " << port << ", ephemeral range " << lo << "-" << hi);
    CHECK((port < lo || port > hi));
    CHECK((port < 10000 || port >= 30000));  // ddp-launch under Slurm: 10000 + job id % 20000
    CHECK(port <= 65535);
    CHECK(seen.insert(port).second);
    CHECK(listen_on_any(port));
  }
}
