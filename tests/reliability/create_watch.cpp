#include "create_watch.h"

#include <chrono>
#include <poll.h>
#include <stdexcept>
#include <sys/inotify.h>
#include <unistd.h>

namespace ddp::test {

CreateWatch::CreateWatch(const std::string& dir) {
  fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0 || ::inotify_add_watch(fd_, dir.c_str(), IN_CREATE) < 0) {
    if (fd_ >= 0) ::close(fd_);
    throw std::runtime_error("inotify on " + dir + " failed");
  }
}

CreateWatch::~CreateWatch() { ::close(fd_); }

std::optional<std::string> CreateWatch::wait(const std::string& part, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  alignas(inotify_event) char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    for (ssize_t off = 0; n > 0 && off < n;) {
      auto* ev = reinterpret_cast<inotify_event*>(buf + off);
      if (ev->len > 0 && std::string(ev->name).find(part) != std::string::npos) return std::string(ev->name);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
    }
  }
}

}  // namespace ddp::test
