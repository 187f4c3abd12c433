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
#include <vector>

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
//
// Several ranks lost together (join_recovery): a survivor lost during a
// recovery joins it, respawned under the same G, when it had not begun to
// re-form its group yet. Its page says so: a survivor clears
// recovery_capable before it touches generation G's store keys and sets it
// again only after every returning rank has advertised (which comes first:
// the returning ranks advertise before the DDP construction they share with
// the survivors). So "still capable, and no returning rank back" means
// "never touched G". One recovery (one G) counts once against
// --max_restarts, however many ranks it brings back.
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
  void exited(WorkerExit& w) override {
    // A returning rank that was back but ended before the next poll (a job
    // that finished within milliseconds of the recovery) is back all the same.
    for (Returning& r : returning_)
      if (recovering_ && !r.rec.completed && r.rec.local_rank == w.local_rank && advertises(w.local_rank, false))
        back(r);
    exited_[w.local_rank] = true;
  }

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
    // advertise" would misname a second failure. A recovery whose ranks are
    // all back, though not polled yet, is over.
    for (Returning& r : returning_)
      if (recovering_ && !r.rec.completed && advertises(r.rec.local_rank, false)) back(r);
    if (recovering_) return join_recovery(w, lost);
    if (!any_capable) return false;  // today's restart, no new line
    const int base = ctl_.info().base_rank;
    if (not_capable) {
      const std::optional<HeartbeatSnapshot> s = ctl_.pages().read(*not_capable);
      return refuse(lost + "; full restart: rank " + std::to_string(base + *not_capable) +
                    (s && s->recovery_generation > 0
                         ? " does not advertise in-place recovery on its heartbeat page (it is still re-forming its "
                           "group after the last recovery, or its training loop stopped with an error)"
                         : " does not advertise in-place recovery on its heartbeat page (a Python rank, a program "
                           "outside ddp-launch's training loop, or a training loop that stopped with an error outside "
                           "a training step: an evaluation, the epoch's end, a checkpoint)"));
    }
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
    returning_.clear();
    lost_at_ = Clock::now();
    lost_ns_ = monotonic_ns();
    step_at_loss_ = step;
    recovering_ = true;
    bring_back(w, generation);
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
    for (Returning& r : returning_)
      if (!r.rec.completed && advertises(r.rec.local_rank, true)) back(r);
    if (!recovering_) return;
    const double seconds = std::chrono::duration<double>(Clock::now() - lost_at_).count();
    if (seconds < kRecoveryTimeoutS) return;
    recovering_ = false;
    const Returning* late = nullptr;
    for (const Returning& r : returning_)
      if (!r.rec.completed) {
        ctl_.record_recovery(r.rec);
        if (!late) late = &r;
      }
    ctl_.log() << "ddp-launch: rank " << late->rec.rank << " did not rejoin within "
               << ddp::seconds_text(kRecoveryTimeoutS) << " of its loss; " << what_follows() << std::endl;
    WorkerExit w;
    w.rank = late->rec.rank;
    w.local_rank = late->rec.local_rank;
    w.signaled = false;
    w.code = 1;
    w.time = std::chrono::system_clock::now();
    w.spawn_error = "in-place recovery: did not rejoin within " + ddp::seconds_text(kRecoveryTimeoutS);
    ctl_.fail(w);
  }

 private:
  // One rank this recovery brings back, from its loss until it is back.
  struct Returning {
    Recovery rec;
    Clock::time_point since;
  };

  // Records the lost rank, respawned under `generation` (the caller says
  // the lost line).
  void bring_back(const WorkerExit& w, uint64_t generation) {
    Returning r;
    r.rec.rank = w.rank;
    r.rec.local_rank = w.local_rank;
    r.rec.generation = generation;
    r.rec.cause = w.status_text();
    r.rec.lost = w.time;
    r.since = Clock::now();
    returning_.push_back(r);
    if (auto& trace = ctl_.info().services.trace)
      trace->instant("rank " + std::to_string(w.rank) + " lost (" + w.status_text() + "): in-place recovery, generation " +
                         std::to_string(generation),
                     monotonic_ns(), w.rank);
    ctl_.record_recovery(r.rec);
    event("RECOVERING", w.local_rank, w.pid, "\"recovery_generation\": " + std::to_string(generation));
  }

  // Whether this local rank's worker started last writes recovery_capable
  // (`running`: and has not exited).
  bool advertises(int lr, bool running) const {
    const std::optional<HeartbeatSnapshot> s = ctl_.pages().read(lr);
    const auto it = pids_.find(lr);
    return s && s->recovery_capable && it != pids_.end() && s->pid == static_cast<uint64_t>(it->second) &&
           !(running && exited_.at(lr));
  }

  // Back: the returning rank writes recovery_capable once it holds the
  // survivors' state (its page's step: the one they redo).
  void back(Returning& r) {
    const int lr = r.rec.local_rank;
    const std::optional<HeartbeatSnapshot> s = ctl_.pages().read(lr);
    const double seconds = std::chrono::duration<double>(Clock::now() - r.since).count();
    r.rec.seconds = seconds;
    const uint64_t at = s ? s->step : 0;
    r.rec.steps_redone = at > 0 && step_at_loss_ + 1 >= at ? step_at_loss_ + 1 - at : 0;
    r.rec.completed = true;
    ctl_.record_recovery(r.rec);
    const bool all = std::all_of(returning_.begin(), returning_.end(), [](const Returning& x) { return x.rec.completed; });
    if (auto& trace = ctl_.info().services.trace) {
      const uint64_t now = monotonic_ns();
      trace->instant("rank " + std::to_string(r.rec.rank) + " back", now, r.rec.rank);
      // One slice for the recovery, from its first loss to its last rank back.
      if (all)
        trace->span("in-place recovery of " + ranks_text() + " (" + std::to_string(r.rec.steps_redone) +
                        (r.rec.steps_redone == 1 ? " step" : " steps") + " redone)",
                    lost_ns_, now);
    }
    event("RECOVERED", lr, pids_[lr],
          "\"recovery_generation\": " + std::to_string(r.rec.generation) + ", \"recovery_s\": " +
              fixed_text(seconds, 3) + ", \"steps_redone\": " + std::to_string(r.rec.steps_redone));
    ctl_.log() << "ddp-launch: rank " << r.rec.rank << " is back after " << fixed_text(seconds, 2)
               << " s (in-place recovery, generation " << r.rec.generation << "; " << r.rec.steps_redone << " step"
               << (r.rec.steps_redone == 1 ? "" : "s") << " redone)" << std::endl;
    if (all) recovering_ = false;
  }

  // "rank 1" or "ranks 1, 2": this recovery's.
  std::string ranks_text() const {
    std::string out = returning_.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < returning_.size(); ++i)
      out += (i ? ", " : "") + std::to_string(returning_[i].rec.rank);
    return out;
  }

  // A failure while ranks come back: a survivor that had not begun to
  // re-form its group joins the recovery (see the class's comment); any
  // other means the full restart.
  bool join_recovery(const WorkerExit& w, const std::string& lost) {
    const bool returning = std::any_of(returning_.begin(), returning_.end(),
                                       [&](const Returning& r) { return r.rec.local_rank == w.local_rank; });
    const bool formed = std::any_of(returning_.begin(), returning_.end(), [](const Returning& r) { return r.rec.completed; });
    if (returning) return second_failure(lost, "a second failure");
    const std::optional<HeartbeatSnapshot> page = ctl_.pages().read(w.local_rank);  // the lost worker's own
    if (formed || !page || !page->recovery_capable)
      return second_failure(lost, "a second failure, after it had begun to re-form its group or its training loop had "
                                  "stopped with an error (outside a training step: an evaluation, the epoch's end, a "
                                  "checkpoint)");
    int survivors = 0;
    uint64_t step = 0;
    for (const auto& [lr, pid] : pids_) {
      const bool coming = std::any_of(returning_.begin(), returning_.end(),
                                      [lr = lr](const Returning& r) { return r.rec.local_rank == lr; });
      if (lr == w.local_rank || exited_[lr] || coming) continue;
      ++survivors;
      if (const std::optional<HeartbeatSnapshot> s = ctl_.pages().read(lr)) step = std::max(step, s->step);
    }
    if (survivors == 0) return second_failure(lost, "no rank that kept its state is left");
    if (!ctl_.respawn(w.local_rank, {{"DDP_RECOVERY_GENERATION", std::to_string(generation_)}}))
      return second_failure(lost, "it could not be started again");
    const std::string with = ranks_text();
    step_at_loss_ = std::max(step_at_loss_, step);
    bring_back(w, generation_);
    ctl_.log() << lost << " at step " << step << ", before it began to re-form its group: bringing it back with "
               << with << " (generation " << generation_ << "; the other " << survivors << " rank"
               << (survivors == 1 ? "" : "s") << " keep their state; the same recovery, " << used_before_ + recoveries_
               << " of --max_restarts " << max_restarts_ << ")" << std::endl;
    return true;
  }

  // Ends the recovery: the full restart, or the end when the budget is used up.
  bool second_failure(const std::string& lost, const std::string& why) {
    const std::string of = ranks_text();
    for (Returning& r : returning_)
      if (!r.rec.completed) ctl_.record_recovery(r.rec);
    recovering_ = false;
    return refuse(lost + " during the recovery of " + of + ": " + why + "; " + what_follows());
  }

  // What follows a recovery that failed: the full restart, or the end.
  std::string what_follows() const {
    const int used = used_before_ + recoveries_;
    return used < max_restarts_ ? std::string("full restart")
                                : "no restart: --max_restarts " + std::to_string(max_restarts_) + " used up (" +
                                      std::to_string(used) + " restarts and recoveries)";
  }

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
  std::vector<Returning> returning_;  // the ranks of the recovery, in the order lost
  Clock::time_point lost_at_;         // its first loss
  uint64_t lost_ns_ = 0;              // the same, on the trace's clock
  uint64_t step_at_loss_ = 0;         // the latest step a survivor was in then
};

}  // namespace

std::unique_ptr<Feature> make_in_place_recovery(AttemptControl& ctl) {
  return std::make_unique<InPlaceRecovery>(ctl);
}

}  // namespace ddp::launcher
