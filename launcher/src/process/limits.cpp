#include "ddp/launcher/process/limits.h"

#include "ddp/common/free_port.h"
#include "ddp/launcher/config/options.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <stdexcept>
#include <string>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

namespace ddp::launcher {

int reserve_check_port(int port) {
  if (port == 0) return pick_free_port();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket failed: ") + std::strerror(errno));
  // TCPStore sets SO_REUSEADDR too, so a port in TIME_WAIT is not "in use".
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    ::close(fd);
    if (e == EADDRINUSE)
      throw UsageError("--master_port " + std::to_string(port) +
                       " is already in use on this node (another job, or workers of an earlier run "
                       "still alive); pick another --master_port or use --standalone for a free one");
    throw UsageError("--master_port " + std::to_string(port) + " cannot be used: " + std::strerror(e));
  }
  ::close(fd);
  return port;
}

size_t launcher_fds_needed(const LogOptions& logs, int nproc) {
  size_t tee_streams = 0;
  for (int lr = 0; lr < nproc; ++lr) {
    const OutputPlan p = plan_output(logs, lr);
    tee_streams += (p.out == StreamTarget::Tee) + (p.err == StreamTarget::Tee);
  }
  return std::max(5 * static_cast<size_t>(nproc), 2 * tee_streams) + 64;
}

void ensure_fd_limit(size_t need) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min<rlim_t>(need, rl.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace ddp::launcher
