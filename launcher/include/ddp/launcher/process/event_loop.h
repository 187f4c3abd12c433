#pragma once
// The launcher's one wait, as systemd's sd-event or ninja's passive
// Subprocess: every part that waits on something (the signalfd, the tee's
// pipes, the rendezvous helper, the file timer's FIFO, a teardown's grace
// period, the next look at the workers' progress) is a passive Source that
// says which fds it watches and when it is next due. The loop owns the
// pollfds and the nearest deadline; each source is handed its own slice of
// readiness, and is told when its deadline has come. No source knows
// another's index or timeout.
//
// Sources are served in the order they were added: a source added first
// sees its readiness before those added after it in the same wake.

#include <chrono>
#include <optional>
#include <poll.h>
#include <vector>

namespace ddp::launcher {

class EventLoop {
 public:
  using Clock = std::chrono::steady_clock;

  class Source {
   public:
    virtual ~Source() = default;
    // The fds to watch for POLLIN now (asked before every wait).
    virtual void fds(std::vector<int>& /*out*/) {}
    // When it is next due; nullopt: not timed now (asked before every wait).
    virtual std::optional<Clock::time_point> deadline() { return std::nullopt; }
    // Some of its fds are ready: `polled` is its slice, in fds()'s order.
    virtual void ready(const pollfd* /*polled*/, size_t /*n*/) {}
    // Its deadline has come.
    virtual void due() {}
  };

  // The source must outlive the loop's use of it (remove() it before).
  void add(Source& s);
  void remove(Source& s);

  // Waits until a source is ready or due, or until `limit` (nullopt: no
  // limit; a past limit only looks), then serves them. Returns false when
  // the limit came with nothing to serve. Throws std::runtime_error when
  // poll fails (EINTR is a wake with nothing to serve).
  bool run_once(std::optional<Clock::time_point> limit = std::nullopt);

 private:
  std::vector<Source*> sources_;
  std::vector<pollfd> polls_;
  std::vector<int> fds_;
  std::vector<size_t> first_;  // by source: its first index in polls_
};

// Milliseconds from now as a deadline; nullopt for a negative count ("none").
std::optional<EventLoop::Clock::time_point> deadline_in_ms(int ms);

}  // namespace ddp::launcher
