#include "ddp/launcher/process/event_loop.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ddp::launcher {

void EventLoop::add(Source& s) { sources_.push_back(&s); }

void EventLoop::remove(Source& s) { sources_.erase(std::remove(sources_.begin(), sources_.end(), &s), sources_.end()); }

std::optional<EventLoop::Clock::time_point> deadline_in_ms(int ms) {
  if (ms < 0) return std::nullopt;
  return EventLoop::Clock::now() + std::chrono::milliseconds(ms);
}

bool EventLoop::run_once(std::optional<Clock::time_point> limit) {
  polls_.clear();
  first_.assign(sources_.size() + 1, 0);
  std::optional<Clock::time_point> wake = limit;
  // Served below by index: a source a callback removes is not called again
  // in this wake, one it adds waits for the next.
  const std::vector<Source*> sources = sources_;
  std::vector<std::optional<Clock::time_point>> due(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    first_[i] = polls_.size();
    fds_.clear();
    sources[i]->fds(fds_);
    for (int fd : fds_) polls_.push_back(pollfd{fd, POLLIN, 0});
    due[i] = sources[i]->deadline();
    if (due[i] && (!wake || *due[i] < *wake)) wake = due[i];
  }
  first_[sources.size()] = polls_.size();
  int timeout_ms = -1;
  if (wake) {
    // Rounded up: a wake a little early would find nothing due and spin.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - Clock::now()).count();
    timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, 24LL * 3600 * 1000));
  }
  const int r = ::poll(polls_.data(), polls_.size(), timeout_ms);
  if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
  const Clock::time_point now = Clock::now();
  bool served = false;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (std::find(sources_.begin(), sources_.end(), sources[i]) == sources_.end()) continue;
    const size_t n = first_[i + 1] - first_[i];
    bool any = false;
    for (size_t k = 0; r > 0 && k < n; ++k) any = any || polls_[first_[i] + k].revents != 0;
    if (any) {
      sources[i]->ready(polls_.data() + first_[i], n);
      served = true;
    }
    if (due[i] && *due[i] <= now) {
      sources[i]->due();
      served = true;
    }
  }
  return served || r < 0;
}

}  // namespace ddp::launcher
