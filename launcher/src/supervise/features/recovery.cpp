#include "ddp/launcher/supervise/features/features.h"

#include "ddp/common/duration_text.h"
#include "ddp/common/heartbeat.h"
#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/report/run_events.h"
#include "ddp/launcher/supervise/run_services.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace ddp::launcher {

namespace {

using Clock = std::chrono::steady_clock;

// How often the launcher looks at a returning rank's page, and how long the
// recovery may take before it gives up on it (the workers' own backstop is
// their collective timeout; this one catches a rank that never rejoins).
constexpr auto kPollEvery = std::chrono::milliseconds(10);
constexpr double kRecoveryTimeoutS = 120;

// --recovery in_place: a failed worker is brought back alone, with the same
// rank and environment plus DDP_RECOVERY_GENERATION=G, while the others keep
// their state: the launcher writes G into each survivor's heartbeat page
// (recovery_generation), which tells the worker runtime to leave the
// collective in flight and re-form its process group under generation G
// (docs/worker-runtime.md, "In-place recovery"). Only when every live rank
// advertises it on its page (recovery_capable); Python ranks and programs
// that do not keep the full restart, as does a second failure during a
// recovery, a rank that does not come back in kRecoveryTimeoutS, a
// c10d rendezvous job (for now) and a used-up --max_restarts: recoveries and
// restarts share that budget. Each outcome is one line.
class InPlaceRecovery final : public Feature, public EventLoop::Source {
 public:
  explicit InPlaceRecovery(AttemptControl& ctl)
      : ctl_(ctl),
        max_restarts_(ctl.info().plan.opts.max_restarts),
        used_before_(ctl.info().placement.restart_count) {}

  EventLoop::Source* source() override { return this; }
  bool after_reaping() const override { return true; }

  void spawned(int local_rank, pid_t pid) override {
    exited_[local_rank] = false;
    pids_[local_rank] = pid;
  }
  void exited(WorkerExit& w) override { exited_[w.local_rank] = true; }

  bool take_failure(const WorkerExit& w) override {
    const std::string lost = "ddp-launch: rank " + std::to_string(w.rank) + " (local_rank " +
                             std::to_string(w.local_rank) + ", pid " + std::to_string(w.pid) + ") lost (" +
                             w.status_text() + ")";
    // Who advertises in-place recovery: every rank but the lost one that is
    // still running, and the lost one (it ran the runtime's loop).
    std::optional<int> not_capable;
    bool any_capable = false;
    uint64_t step = 0;
    int survivors = 0;
    for (int lr = 0; lr < ctl_.info().plan.nproc; ++lr) {
      const bool running = lr != w.local_rank && pids_.count(lr) && !exited_[lr];
      if (!running && lr != w.local_rank) continue;
      const std::optional<HeartbeatSnapshot> s = ctl_.pages().read(lr);
      const bool capable = s && s->recovery_capable;
      any_capable = any_capable || capable;
      if (!capable && !not_capable) not_capable = lr;
      if (running) {
        ++survivors;
        if (s) step = std::max(step, s->step);
      }
    }
    if (!ctl_.info().plan.opts.recovery_in_place) return false;
    // First: the returning rank has not advertised yet, so "does not
    // advertise" would misname a second failure.
    if (recovering_) {
      current_.seconds = 0;
      ctl_.record_recovery(current_);
      recovering_ = false;
      const int used = used_before_ + recoveries_;
      return refuse(lost + " during the recovery of rank " + std::to_string(current_.rank) + ": a second failure; " +
                    (used < max_restarts_ ? std::string("full restart")
                                          : "no restart: --max_restarts " + std::to_string(max_restarts_) +
                                                " used up (" + std::to_string(used) + " restarts and recoveries)"));
    }
    if (!any_capable) return false;  // today's restart, no new line
    const int base = ctl_.info().base_rank;
    if (not_capable) return refuse(lost + "; full restart: rank " + std::to_string(base + *not_capable) +
                                   " does not advertise in-place recovery on its heartbeat page (a Python rank, or "
                                   "a program outside ddp-launch's training loop)");
    if (ctl_.info().services.agent)
      return refuse(lost + "; full restart: in-place recovery is for static rendezvous jobs for now (not c10d)");
    const int used = used_before_ + recoveries_;
    if (used >= max_restarts_) {
      if (max_restarts_ == 0) return false;  // no restart was asked for: today's end, no new line
      return refuse(lost + "; no recovery: --max_restarts " + std::to_string(max_restarts_) + " used up (" +
                    std::to_string(used) + " restarts and recoveries)");
    }
    if (survivors == 0) return false;  // nobody to keep state: the restart is the recovery
    const uint64_t generation = ++generation_;
    for (const auto& [lr, pid] : pids_)
      if (lr != w.local_rank && !exited_[lr]) ctl_.tell_recovery_generation(lr, generation);
    if (!ctl_.respawn(w.local_rank, {{"DDP_RECOVERY_GENERATION", std::to_string(generation)}}))
      return refuse(lost + "; full restart: it could not be started again");
    ++recoveries_;
    current_ = Recovery{};
    current_.rank = w.rank;
    current_.local_rank = w.local_rank;
    current_.generation = generation;
    current_.cause = w.status_text();
    current_.lost = w.time;
    lost_at_ = Clock::now();
    lost_ns_ = monotonic_ns();
    if (auto& trace = ctl_.info().services.trace)
      trace->instant("rank " + std::to_string(w.rank) + " lost (" + w.status_text() + "): in-place recovery, generation " +
                         std::to_string(generation),
                     lost_ns_, w.rank);
    step_at_loss_ = step;
    recovering_ = true;
    ctl_.record_recovery(current_);
    event("RECOVERING", w.local_rank, w.pid, "\"recovery_generation\": " + std::to_string(generation));
    ctl_.log() << lost << " at step " << step << "; bringing back only it, in place (generation " << generation
               << "; the other " << survivors << " rank" << (survivors == 1 ? "" : "s")
               << " keep their state; recovery " << used + 1 << " of --max_restarts " << max_restarts_ << ")"
               << std::endl;
    return true;
  }

  // EventLoop::Source: while a rank is coming back, look at its page.
  std::optional<EventLoop::Clock::time_point> deadline() override {
    if (!recovering_) return std::nullopt;
    return EventLoop::Clock::now() + kPollEvery;
  }
  void due() override {
    if (!recovering_ || ctl_.stopping()) return;
    const int lr = current_.local_rank;
    const std::optional<HeartbeatSnapshot> s = ctl_.pages().read(lr);
    const double seconds = std::chrono::duration<double>(Clock::now() - lost_at_).count();
    // Back: the returning rank writes recovery_capable once it holds the
    // survivors' state and is in the step they redo (its page's step).
    if (s && s->recovery_capable && pids_.count(lr) && s->pid == static_cast<uint64_t>(pids_[lr]) && !exited_[lr]) {
      recovering_ = false;
      current_.seconds = seconds;
      current_.steps_redone = s->step > 0 && step_at_loss_ + 1 >= s->step ? step_at_loss_ + 1 - s->step : 0;
      current_.completed = true;
      ctl_.record_recovery(current_);
      if (auto& trace = ctl_.info().services.trace) {
        const uint64_t now = monotonic_ns();
        trace->instant("rank " + std::to_string(current_.rank) + " back", now, current_.rank);
        trace->span("in-place recovery of rank " + std::to_string(current_.rank) + " (" +
                        std::to_string(current_.steps_redone) + (current_.steps_redone == 1 ? " step" : " steps") +
                        " redone)",
                    lost_ns_, now);
      }
      event("RECOVERED", lr, pids_[lr],
            "\"recovery_generation\": " + std::to_string(current_.generation) + ", \"recovery_s\": " +
                fixed_text(seconds, 3) + ", \"steps_redone\": " + std::to_string(current_.steps_redone));
      ctl_.log() << "ddp-launch: rank " << current_.rank << " is back after " << fixed_text(seconds, 2)
                 << " s (in-place recovery, generation " << current_.generation << "; " << current_.steps_redone
                 << " step" << (current_.steps_redone == 1 ? "" : "s") << " redone)" << std::endl;
      return;
    }
    if (seconds < kRecoveryTimeoutS) return;
    recovering_ = false;
    ctl_.record_recovery(current_);
    ctl_.log() << "ddp-launch: rank " << current_.rank << " did not rejoin within "
               << ddp::seconds_text(kRecoveryTimeoutS) << " of its loss; full restart" << std::endl;
    WorkerExit w;
    w.rank = current_.rank;
    w.local_rank = lr;
    w.signaled = false;
    w.code = 1;
    w.time = std::chrono::system_clock::now();
    w.spawn_error = "in-place recovery: did not rejoin within " + ddp::seconds_text(kRecoveryTimeoutS);
    ctl_.fail(w);
  }

 private:
  // --event_log_handler console: ddp-launch's own worker states RECOVERING
  // (the lost worker) and RECOVERED (the one back), as STRAGGLER is.
  void event(const char* state, int local_rank, pid_t pid, const std::string& more) {
    if (ctl_.info().plan.opts.event_log_handler != EventLogHandler::Console) return;
    StatusEvent e = worker_event(ctl_.info().plan, state, ctl_.result(), local_rank, pid);
    e.more_metadata = more;
    ctl_.log() << format_status_event(e) << std::flush;
  }

  bool refuse(const std::string& line) {
    ctl_.log() << line << std::endl;
    return false;
  }

  AttemptControl& ctl_;
  const int max_restarts_;
  const int used_before_;  // restarts and recoveries before this attempt
  int recoveries_ = 0;
  uint64_t generation_ = 0;
  std::map<int, pid_t> pids_;   // by local rank: the worker started last
  std::map<int, bool> exited_;  // by local rank: that worker was reaped
  bool recovering_ = false;
  Recovery current_;
  Clock::time_point lost_at_;
  uint64_t lost_ns_ = 0;  // the same, on the trace's clock
  uint64_t step_at_loss_ = 0;
};

}  // namespace

std::unique_ptr<Feature> make_in_place_recovery(AttemptControl& ctl) {
  return std::make_unique<InPlaceRecovery>(ctl);
}

}  // namespace ddp::launcher
