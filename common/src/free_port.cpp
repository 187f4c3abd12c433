#include "ddp/common/free_port.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <stdexcept>
#include <string>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace ddp {
namespace {

constexpr int kLowest = 30000;
constexpr size_t kFewest = 1000;
constexpr int kMaxTries = 200;

// A socket bound to `port` on one family's any-address, without
// SO_REUSEADDR (a port in TIME_WAIT counts as taken); -1 with errno set when
// the socket or the bind fails.
int bind_family(int family, int port) {
  const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_storage a{};
  socklen_t len = sizeof(sockaddr_in);
  if (family == AF_INET6) {
    const int off = 0;  // dual-stack whatever net.ipv6.bindv6only says: [::] covers 0.0.0.0 too
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
    auto& in6 = reinterpret_cast<sockaddr_in6&>(a);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    auto& in4 = reinterpret_cast<sockaddr_in&>(a);
    in4.sin_family = AF_INET;
    in4.sin_port = htons(static_cast<uint16_t>(port));
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// Bound on every address: [::] (IPv4 as well), or 0.0.0.0 where IPv6 is not
// there; a port in use is in use, whichever family says so.
int bind_any(int port) {
  const int fd = bind_family(AF_INET6, port);
  if (fd >= 0 || errno == EADDRINUSE) return fd;
  return bind_family(AF_INET, port);
}

int port_of(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(a).sin6_port
                                       : reinterpret_cast<sockaddr_in&>(a).sin_port);
}

std::vector<int> candidates() {
  const PortRange ephemeral = ephemeral_port_range();
  std::vector<int> ports;
  for (int p = kLowest; p <= 65535; ++p)
    if (!ephemeral.contains(p)) ports.push_back(p);
  return ports;
}

// getrandom(2), not std::random_device (libstdc++'s calls arc4random: glibc
// 2.36, above the wheel's platform tag).
size_t random_index(size_t n) {
  uint32_t bits = 0;
  if (::getrandom(&bits, sizeof(bits), 0) != static_cast<ssize_t>(sizeof(bits)))
    bits = static_cast<uint32_t>(::getpid()) * 2654435761u;
  return bits % n;
}

}  // namespace

PortRange ephemeral_port_range() {
  PortRange r;
  int lo = 0, hi = 0;
  if (std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> lo >> hi) r = PortRange{lo, hi};
  return r;
}

int pick_free_port(const std::function<bool(int)>& usable) {
  const std::vector<int> ports = candidates();
  if (ports.size() >= kFewest) {
    const size_t start = random_index(ports.size());
    int tried = 0;
    for (size_t i = 0; i < ports.size() && tried < kMaxTries; ++i) {
      const int port = ports[(start + i) % ports.size()];
      if (usable && !usable(port)) continue;
      ++tried;
      const int fd = bind_any(port);
      if (fd < 0) continue;
      ::close(fd);
      return port;
    }
  }
  const int fd = bind_any(0);
  if (fd < 0) throw std::runtime_error(std::string("no free TCP port: ") + std::strerror(errno));
  const int port = port_of(fd);
  ::close(fd);
  if (port <= 0) throw std::runtime_error(std::string("no free TCP port: getsockname: ") + std::strerror(errno));
  return port;
}

}  // namespace ddp
