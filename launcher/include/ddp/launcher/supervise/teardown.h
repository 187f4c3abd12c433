#pragma once
// How an attempt's groups are stopped, as a pure state machine over the
// Workers interface and an injected clock (tests drive it with a fake):
//  - begin(sig) sends sig to every group; the first call starts the grace
//    period (--shutdown_timeout);
//  - when the grace period is over the caller kill()s: SIGKILL to every
//    group, and kAfterKillWaitS for the kernel to end them;
//  - when that is over too, the caller gives up on what is left (the
//    groups SIGKILL cannot end: unkillable.h);
//  - once every worker is reaped but its groups are not empty (a
//    DataLoader-style child, a daemon), those get SIGTERM once, even when a
//    forwarded SIGINT/SIGQUIT began the teardown: background children of
//    shells ignore those two.

#include "ddp/launcher/process/workers.h"

#include <chrono>
#include <functional>
#include <optional>

namespace ddp::launcher {

class Teardown {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  Teardown(Workers& workers, double grace_s, double after_kill_s, Now now = Clock::now);

  void begin(int sig);
  void kill();
  // Every worker is reaped: the leftovers' SIGTERM, once.
  void workers_gone();

  bool stopping() const { return stopping_; }
  bool killed() const { return killed_; }
  // The end of the grace period, or of the wait after SIGKILL; nullopt
  // before any teardown.
  std::optional<Clock::time_point> deadline() const;

  enum class Step { Kill, GiveUp };
  // What the deadline asks for once it has come.
  Step step() const { return killed_ ? Step::GiveUp : Step::Kill; }

 private:
  Workers& workers_;
  Clock::duration grace_, after_kill_;
  Now now_;
  bool stopping_ = false;
  bool killed_ = false;
  bool leftovers_termed_ = false;
  Clock::time_point deadline_{};
};

}  // namespace ddp::launcher
