#include "ddp/launcher/supervise/features/features.h"

#include "ddp/common/duration_text.h"
#include "ddp/common/heartbeat.h"
#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/elastic/job_recovery.h"
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
constexpr auto kStandbyPollEvery = std::chrono::milliseconds(250);

// --recovery in_place: a failed worker is brought back alone, with the same
// rank and environment plus DDP_RECOVERY_GENERATION=G, while the others keep
// their state: the launcher writes G into each survivor's heartbeat page
// (recovery_generation), which tells the worker runtime to leave the
// collective in flight and re-form its process group under generation G
// (docs/worker-runtime.md, "In-place recovery"). Only when every live rank
// advertises it on its page (recovery_capable); Python ranks and programs
// that do not keep the full restart, as does a second failure during a
// recovery, a rank that does not come back in kRecoveryTimeoutS and a
// used-up --max_restarts: recoveries and restarts share that budget. Each
// outcome is one line.
// c10d: the generation and the budget are the job's (job_recovery.h): the
// rendezvous grants this node's recovery (or refuses it: another node's
// runs, the budget is used up) before anything starts, and another node's
// recovery reaches this node's ranks as its generation on their pages.
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
        used_before_(ctl.info().placement.restart_count),
        job_(ctl.info().services.job_recovery ? &*ctl.info().services.job_recovery : nullptr) {
    if (job_) job_->listen([this](const RdzvEvent& e) { heard(e); });
  }
  ~InPlaceRecovery() override {
    if (job_) job_->listen({});
  }

  EventLoop::Source* source() override { return this; }
  bool after_reaping() const override { return true; }

  void spawned(int local_rank, pid_t pid) override {
    const bool first = !pids_.count(local_rank);
    exited_[local_rank] = false;
    pids_[local_rank] = pid;
    if (first && ctl_.info().placement.recovery_generation > 0) take_over(local_rank, pid);
  }

  // c10d: this node, a hot spare, took a lost node's place in the running
  // round (rendezvous.h, "takeover"): each of its ranks starts as a
  // returning rank of the job's generation, and the recovery is done (its
  // record too: `recovered`) when all are back, as any other.
  void take_over(int local_rank, pid_t pid) {
    const Placement& p = ctl_.info().placement;
    if (returning_.empty()) {
      took_over_ = true;
      generation_ = p.recovery_generation;
      used_at_begin_ = p.recovery_used;
      restarts_used_ = std::max(restarts_used_, p.recovery_used + 1);
      recovering_ = true;
      lost_at_ = Clock::now();
      lost_ns_ = monotonic_ns();
      const int n = ctl_.info().plan.nproc;
      ctl_.log() << "ddp-launch: this node, a hot spare, takes node n" << (p.placement ? p.placement->group_rank : 0)
                 << "'s place in the running round: its " << n << (n == 1 ? " rank comes" : " ranks come")
                 << " back in place (generation "
                 << p.recovery_generation << "; recovery " << p.recovery_used + 1 << " of --max_restarts "
                 << max_restarts_ << " for the job)" << std::endl;
    }
    Returning r;
    r.rec.rank = ctl_.info().base_rank + local_rank;
    r.rec.local_rank = local_rank;
    r.rec.generation = p.recovery_generation;
    r.rec.cause = "its node was lost; a hot spare took its place";
    r.rec.lost = std::chrono::system_clock::now();
    r.since = Clock::now();
    returning_.push_back(r);
    ctl_.record_recovery(r.rec);
    event("RECOVERING", local_rank, pid, "\"recovery_generation\": " + std::to_string(p.recovery_generation));
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
    uint64_t step = 0, lost_step = 0;
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
      } else if (s) {
        lost_step = s->step;
      }
    }
    // No survivor here (c10d, the others on other nodes): the lost rank's
    // own page says the step it was in.
    if (survivors == 0) step = lost_step;
    if (!ctl_.info().plan.opts.recovery_in_place) return false;
    if (asked_) {  // the job has not answered for the first one yet: it stays the root cause
      asked_ = false;
      job_->cancel();  // granted or not, it never began: it counts not
      refused_ = asked_exit_;
      return refuse(lost + " while the in-place recovery of rank " + std::to_string(asked_exit_.rank) +
                    " waited for the rendezvous: a second failure; full restart");
    }
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
    const int used = used_before_ + recoveries_;
    if (used >= max_restarts_) {
      if (max_restarts_ == 0) return false;  // no restart was asked for: today's end, no new line
      return refuse(lost + "; no recovery: --max_restarts " + std::to_string(max_restarts_) + " used up (" +
                    std::to_string(used) + " restarts and recoveries)");
    }
    // Nobody to keep state: the restart is the recovery.
    if (survivors == 0 && ranks_elsewhere() == 0) return false;
    if (job_) {  // c10d: the job's generation and budget first (heard() goes on)
      job_->ask(max_restarts_, w.rank);
      asked_ = true;
      asked_exit_ = w;
      asked_lost_ = lost;
      asked_step_ = step;
      asked_survivors_ = survivors;
      return true;
    }
    return begin(w, lost, ++generation_, used, survivors, step);
  }

  // Brings the lost worker back under `generation`; `used`: the restarts
  // and recoveries before this one.
  bool begin(const WorkerExit& w, const std::string& lost, uint64_t generation, int used, int survivors,
             uint64_t step) {
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
    restarts_used_ = std::max(restarts_used_, used + 1);
    used_at_begin_ = used;
    const int others = survivors + ranks_elsewhere();
    ctl_.log() << lost << " at step " << step << "; bringing back only it, in place (generation " << generation
               << "; the other " << others << " rank" << (others == 1 ? "" : "s") << " keep their state"
               << (job_ ? " on every node" : "") << "; recovery " << used + 1 << " of --max_restarts "
               << max_restarts_ << (job_ ? " for the job" : "") << ")" << std::endl;
    return true;
  }

  // c10d: the rendezvous' answer for this node's lost rank, or another
  // node's recovery.
  void heard(const RdzvEvent& e) {
    if (ctl_.stopping()) {
      if (asked_ && e.kind == RdzvEvent::Recovery) job_->cancel();  // never begun
      asked_ = false;
      return;
    }
    if (e.kind == RdzvEvent::PeerRecovery) {
      // Not counted here: the node of the lost rank counts it (its grant
      // says the job's count), and its "no restarts left" ends every node.
      // A grant that node gives up counts not, and this one cannot know.
      int here = 0;
      for (const auto& [lr, pid] : pids_)
        if (!exited_[lr]) {
          ctl_.tell_recovery_generation(lr, e.generation);
          ++here;
        }
      ctl_.log() << "ddp-launch: rank " << e.rank << " on " << e.text << " lost; the " << here << " rank"
                 << (here == 1 ? "" : "s") << " here keep their state (in-place recovery, generation "
                 << e.generation << ")" << std::endl;
      return;
    }
    if (!asked_) return;  // a second failure came first (and cancelled it)
    asked_ = false;
    if (e.kind == RdzvEvent::Recovery) {
      generation_ = e.generation;
      if (begin(asked_exit_, asked_lost_, e.generation, e.used, asked_survivors_, asked_step_)) return;
      job_->cancel();  // it could not be started again: the full restart counts, not this
    } else {
      restarts_used_ = std::max(restarts_used_, e.used);
      refuse(asked_lost_ + (e.used_up ? "; no recovery: " : "; full restart: ") + e.text);
    }
    refused_ = asked_exit_;
    ctl_.fail(asked_exit_);
  }

  // c10d: this node's only rank lost, the rendezvous not answered yet.
  bool holds_attempt() const override { return asked_ && !ctl_.stopping(); }

  void finish(AttemptResult& r) override {
    r.restarts_used = std::max(r.restarts_used, restarts_used_);
  }
  std::optional<WorkerExit> root_cause(const AttemptResult&) const override { return refused_; }

  // EventLoop::Source: while a rank is coming back, look at its page.
  // And, until a rank advertises in-place recovery, look for one every
  // kStandbyPollEvery: then a standby process is worth its memory (standby.h).
  // (A fixed time: other sources' wakes must not keep moving it.)
  std::optional<EventLoop::Clock::time_point> deadline() override {
    std::optional<EventLoop::Clock::time_point> at;
    if (!standby_asked_) at = standby_look_;
    if (recovering_) {
      const auto poll = EventLoop::Clock::now() + kPollEvery;
      at = at ? std::min(*at, poll) : poll;
    }
    return at;
  }
  void due() override {
    if (!standby_asked_ && !ctl_.stopping() && EventLoop::Clock::now() >= standby_look_) {
      standby_look_ = EventLoop::Clock::now() + kStandbyPollEvery;
      for (const auto& [lr, pid] : pids_)
        if (!exited_[lr] && advertises(lr, true)) {
          standby_asked_ = true;
          ctl_.start_standby();
          break;
        }
    }
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
    const int used = job_ ? give_up_job_recovery() : used_before_ + recoveries_;
    ctl_.log() << "ddp-launch: rank " << late->rec.rank << " did not rejoin within "
               << ddp::seconds_text(kRecoveryTimeoutS) << " of its loss; " << what_follows(used) << std::endl;
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
    // A takeover's spare never saw the lost node's step: its ranks join
    // the one the survivors redo (the interrupted one).
    if (took_over_) r.rec.steps_redone = at > 0 ? 1 : 0;
    else r.rec.steps_redone = at > 0 && step_at_loss_ + 1 >= at ? step_at_loss_ + 1 - at : 0;
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
    if (all) {
      recovering_ = false;
      if (job_) job_->back(r.rec.generation);
      ctl_.start_standby();  // for the next loss; not earlier: it would compete with this recovery
    }
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
    if (survivors == 0 && ranks_elsewhere() == 0) return second_failure(lost, "no rank that kept its state is left");
    if (!ctl_.respawn(w.local_rank, {{"DDP_RECOVERY_GENERATION", std::to_string(generation_)}}))
      return second_failure(lost, "it could not be started again");
    const std::string with = ranks_text();
    survivors += ranks_elsewhere();
    step_at_loss_ = std::max(step_at_loss_, step);
    bring_back(w, generation_);
    ctl_.log() << lost << " at step " << step << ", before it began to re-form its group: bringing it back with "
               << with << " (generation " << generation_ << "; the other " << survivors << " rank"
               << (survivors == 1 ? "" : "s") << " keep their state; the same recovery, "
               << (job_ ? used_at_begin_ + 1 : used_before_ + recoveries_) << " of --max_restarts " << max_restarts_
               << ")" << std::endl;
    return true;
  }

  // Ends the recovery: the full restart, or the end when the budget is used up.
  bool second_failure(const std::string& lost, const std::string& why) {
    const std::string of = ranks_text();
    for (Returning& r : returning_)
      if (!r.rec.completed) ctl_.record_recovery(r.rec);
    recovering_ = false;
    // c10d: the full restart replaces it, and only the restart counts.
    const int used = job_ ? give_up_job_recovery() : used_before_ + recoveries_;
    return refuse(lost + " during the recovery of " + of + ": " + why + "; " + what_follows(used));
  }

  // What follows a recovery that failed (`used`: the restarts and
  // recoveries counted): the full restart, or the end.
  std::string what_follows(int used) const {
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

  // c10d: this node's recovery, cut short, is void in the rendezvous (the
  // full restart that replaces it counts, not both: the nodes' counts then
  // agree); the job's restarts and recoveries before it.
  int give_up_job_recovery() {
    job_->cancel();
    restarts_used_ = used_at_begin_;
    return used_at_begin_;
  }

  // The job's ranks on other nodes (c10d rounds of several nodes).
  int ranks_elsewhere() const {
    const auto& p = ctl_.info().placement.placement;
    return p ? std::max(0, p->world_size - ctl_.info().plan.nproc) : 0;
  }

  bool refuse(const std::string& line) {
    ctl_.log() << line << std::endl;
    return false;
  }

  AttemptControl& ctl_;
  const int max_restarts_;
  const int used_before_;  // restarts and recoveries before this attempt
  JobRecovery* const job_;  // c10d: the job's generation and budget; null for static rendezvous
  int recoveries_ = 0;
  uint64_t generation_ = 0;
  std::map<int, pid_t> pids_;   // by local rank: the worker started last
  std::map<int, bool> exited_;  // by local rank: that worker was reaped
  bool recovering_ = false;
  // A rank advertised (the attempt keeps a standby from then on), or --recovery_standby off.
  bool standby_asked_ = !ctl_.info().plan.opts.recovery_standby;
  EventLoop::Clock::time_point standby_look_ = EventLoop::Clock::now() + kStandbyPollEvery;  // the next look for one
  bool took_over_ = false;  // c10d: this node, a hot spare, took a lost node's place (take_over)
  std::vector<Returning> returning_;  // the ranks of the recovery, in the order lost
  Clock::time_point lost_at_;         // its first loss
  uint64_t lost_ns_ = 0;              // the same, on the trace's clock
  uint64_t step_at_loss_ = 0;         // the latest step a survivor was in then
  // c10d: a lost worker whose recovery waits for the rendezvous' answer.
  bool asked_ = false;
  WorkerExit asked_exit_;
  std::string asked_lost_;
  uint64_t asked_step_ = 0;
  int asked_survivors_ = 0;
  std::optional<WorkerExit> refused_;  // its failure ended the attempt: the root cause
  int restarts_used_ = 0;              // the job's restarts and recoveries, as far as heard
  int used_at_begin_ = 0;              // c10d: the job's restarts and recoveries before this node's last one
};

}  // namespace

std::unique_ptr<Feature> make_in_place_recovery(AttemptControl& ctl) {
  return std::make_unique<InPlaceRecovery>(ctl);
}

}  // namespace ddp::launcher
