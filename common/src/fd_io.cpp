#include "ddp/common/fd_io.h"

#include <algorithm>
#include <unistd.h>

namespace ddp::fd {

Moved write_all(int fd, const void* data, size_t n, WhenFull when_full) {
  const char* p = static_cast<const char*>(data);
  Moved m;
  while (m.bytes < n) {
    const ssize_t w = ::write(fd, p + m.bytes, n - m.bytes);
    if (w > 0) {
      m.bytes += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN && when_full == WhenFull::wait) {
      pollfd room{fd, POLLOUT, 0};
      ::poll(&room, 1, -1);
      continue;
    }
    m.error = w < 0 ? errno : 0;
    return m;
  }
  return m;
}

ssize_t read_some(int fd, void* buf, size_t n) {
  return retry_eintr([&] { return ::read(fd, buf, n); });
}

Moved read_full(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  Moved m;
  while (m.bytes < n) {
    const ssize_t r = read_some(fd, p + m.bytes, n - m.bytes);
    if (r <= 0) {
      m.error = r < 0 ? errno : 0;
      return m;
    }
    m.bytes += static_cast<size_t>(r);
  }
  return m;
}

Moved pread_full(int fd, void* buf, size_t n, off_t at) {
  char* p = static_cast<char*>(buf);
  Moved m;
  while (m.bytes < n) {
    const ssize_t r =
        retry_eintr([&] { return ::pread(fd, p + m.bytes, n - m.bytes, at + static_cast<off_t>(m.bytes)); });
    if (r <= 0) {
      m.error = r < 0 ? errno : 0;
      return m;
    }
    m.bytes += static_cast<size_t>(r);
  }
  return m;
}

int poll_until(pollfd* fds, size_t n, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    const int r = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
    if (!(r < 0 && errno == EINTR)) return r;
  }
}

}  // namespace ddp::fd
