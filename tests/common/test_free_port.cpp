// pick_free_port (ddp/common/free_port.h): the port ddp-launch hands its
// workers for their store (--standalone, port 0, each c10d round).
#include "ddp/common/free_port.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <set>
#include <sys/socket.h>
#include <unistd.h>

TEST_CASE("pick_free_port: outside the kernel's ephemeral range, at 30000 or above, listenable") {
  const ddp::PortRange eph = ddp::ephemeral_port_range();
  std::set<int> seen;
  for (int i = 0; i < 100; ++i) {
    const int port = ddp::pick_free_port();
    INFO("port " << port << ", ephemeral range " << eph.lo << "-" << eph.hi);
    CHECK_FALSE(eph.contains(port));
    CHECK(port >= 30000);  // ddp-launch under Slurm: 10000 + job id % 20000; torchrun's 29400, 29500
    CHECK(port <= 65535);
    CHECK(ddp::test::can_listen_on_any(port));
    seen.insert(port);
  }
  CHECK(seen.size() > 50);  // random, not one port again and again
}

TEST_CASE("pick_free_port: a port someone listens on is never picked, nor one the caller refuses") {
  const int taken_port = ddp::pick_free_port();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(taken_port));
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  // Only the taken port and one other are acceptable to the caller: the other comes back, every time.
  int other = taken_port;
  while (other == taken_port) other = ddp::pick_free_port();
  for (int i = 0; i < 20; ++i) CHECK(ddp::pick_free_port([&](int p) { return p == taken_port || p == other; }) == other);
  ::close(fd);
}

TEST_CASE("pick_free_port: when the caller refuses every candidate, the kernel's pick") {
  const ddp::PortRange eph = ddp::ephemeral_port_range();
  const int port = ddp::pick_free_port([](int) { return false; });
  INFO("port " << port);
  CHECK(eph.contains(port));
  CHECK(ddp::test::can_listen_on_any(port));
}

TEST_CASE("the tests' free_port(): pick_free_port's ports, never twice in a process") {
  const ddp::PortRange eph = ddp::ephemeral_port_range();
  std::set<int> seen;
  for (int i = 0; i < 200; ++i) {
    const int port = ddp::test::free_port();
    INFO("port " << port);
    CHECK_FALSE(eph.contains(port));
    CHECK(port >= 30000);
    CHECK(seen.insert(port).second);
  }
}
