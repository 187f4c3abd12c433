#pragma once
// The rendezvous helper (rdzv_link.h) as a source of an EventLoop: its fd while it lives,
// its next ping as the deadline, and each line it says handed to on_event().
// The attempt's rendezvous feature and ElasticRun's wait are both one.

#include "ddp/launcher/elastic/rdzv_link.h"
#include "ddp/launcher/process/event_loop.h"

namespace ddp::launcher {

class AgentSource : public EventLoop::Source {
 public:
  explicit AgentSource(RdzvLink& agent) : agent_(agent) {}

  void fds(std::vector<int>& out) override {
    if (!agent_.gone()) out.push_back(agent_.fd());
  }
  std::optional<EventLoop::Clock::time_point> deadline() override {
    if (agent_.gone()) return std::nullopt;
    return deadline_in_ms(agent_.ms_to_ping());
  }
  void due() override {
    if (!agent_.gone()) agent_.ping_if_due();
  }
  void ready(const pollfd*, size_t) override {
    for (const RdzvEvent& e : agent_.read()) on_event(e);
  }

 protected:
  virtual void on_event(const RdzvEvent& e) = 0;

  RdzvLink& agent_;
};

}  // namespace ddp::launcher
