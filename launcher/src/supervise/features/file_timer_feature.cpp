// torchrun's file timer (watch/file_timer_server.h), served in the attempt's
// loop: the FIFO's requests, and the nearest expiry as a deadline. Each
// expiry sends its scope's signal; the first while the group runs ends the
// attempt as a failure whose root cause is that rank (exit code 124); later
// ones, during the teardown, only send theirs, as torchrun's watchdog would.
#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/supervise/run_services.h"
#include "ddp/launcher/watch/file_timer_server.h"

#include <algorithm>
#include <csignal>
#include <map>
#include <unistd.h>

namespace ddp::launcher {

namespace {

class FileTimer final : public Feature, public EventLoop::Source {
 public:
  explicit FileTimer(AttemptControl& ctl) : ctl_(ctl), timers_(*ctl.info().services.timers) {
    timers_.table().clear();  // an earlier attempt's scopes went with its processes
  }

  EventLoop::Source* source() override { return this; }
  void fds(std::vector<int>& out) override { out.push_back(timers_.fd()); }
  std::optional<EventLoop::Clock::time_point> deadline() override {
    return deadline_in_ms(timers_.ms_to_next_expiry(wall_seconds()));
  }
  void ready(const pollfd* polled, size_t) override { serve(polled[0].revents); }
  void due() override { serve(0); }

  void before_spawn(WorkerSlot& w) override { w.group.timer_file = timers_.path(); }
  void reaped(pid_t pid) override { timers_.table().drop_pid(pid); }

  // The expired rank's exit carries its scope, whether it was reaped
  // before the expiry (the scope was a child's of a worker that had exited)
  // or after.
  void finish(AttemptResult& r) override {
    for (const auto& [lr, x] : expired_)
      for (WorkerExit& w : r.exits)
        if (w.local_rank == lr && w.pid == ctl_.worker_pid(lr)) {
          w.expired_scope = x;
          w.after_teardown = false;
        }
  }

 private:
  void serve(short revents) {
    const double now = wall_seconds();
    if (revents & POLLIN) {
      const std::string warning =
          timers_.read(now, [&](pid_t pid) { return ctl_.local_rank_of_group(::getpgid(pid)) >= 0; });
      if (!warning.empty()) ctl_.log() << warning << std::endl;
    }
    for (const ExpiredPid& e : timers_.table().take_expired(now)) expire(e);
  }

  void expire(const ExpiredPid& e) {
    // Only a process of this attempt's live groups gets a signal, and a
    // group the kernel has given a reused id never does.
    const int lr = ctl_.local_rank_of_group(::getpgid(e.pid));
    if (lr < 0) return;  // gone: nothing to signal, and its pid may be someone else's now
    const int base = ctl_.info().base_rank;
    const std::string who = "rank " + std::to_string(base + lr) + " (local_rank " + std::to_string(lr) + ", pid " +
                            std::to_string(e.pid) + ")";
    if (!e.fired) {  // FileTimerServer too leaves it alone
      ctl_.log() << "ddp-launch: " << who << ": timer scope '" << e.scopes.front().scope_id
                 << "' expired; it asked for no signal, so it is left running" << std::endl;
      return;
    }
    ExpiredScope x;
    x.scope_id = e.fired->scope_id;
    x.pid = e.pid;
    x.signal = e.fired->signal;
    x.acquired_for_s = std::max(0.0, e.fired->expiration_time - e.fired->acquired_at);
    x.acquired_at = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::duration<double>(e.fired->acquired_at)));
    x.expired_at = std::chrono::system_clock::now();
    ::kill(e.pid, x.signal);
    if (ctl_.stopping()) return;
    ctl_.log() << "ddp-launch: " << who << ": " << format_expired_scope(x) << "; stopping the group" << std::endl;
    expired_[lr] = x;
    WorkerExit told;
    told.rank = base + lr;
    told.local_rank = lr;
    told.pid = e.pid;
    told.expired_scope = x;
    ctl_.fail(told);
  }

  AttemptControl& ctl_;
  FileTimerServer& timers_;
  std::map<int, ExpiredScope> expired_;  // by local rank: the scope that ended the attempt
};

}  // namespace

std::unique_ptr<Feature> make_file_timer(AttemptControl& ctl) { return std::make_unique<FileTimer>(ctl); }

}  // namespace ddp::launcher
