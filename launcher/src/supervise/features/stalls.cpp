// --stall_timeout (watch/progress_watch.h): the launcher looks at the
// attempt's heartbeat pages (and the output it sees) when due, and a
// straggler without progress for the timeout is the attempt's root cause
// (exit code 124): its stacks are dumped, then the group is stopped like a
// failed one, so --max_restarts applies.
#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/watch/progress_watch.h"

#include "ddp/common/duration_text.h"

namespace ddp::launcher {

namespace {

class Stalls final : public Feature, public EventLoop::Source {
 public:
  explicit Stalls(AttemptControl& ctl)
      : ctl_(ctl),
        progress_(ctl.info().plan.opts.stall_timeout_s, ctl.pages(), ctl.result().world_size <= ctl.info().plan.nproc) {}

  EventLoop::Source* source() override { return this; }
  bool after_reaping() const override { return true; }

  std::optional<EventLoop::Clock::time_point> deadline() override {
    if (ctl_.stopping() || stall_) return std::nullopt;
    return deadline_in_ms(progress_.ms_to_check());
  }

  void due() override {
    if (ctl_.stopping()) return;
    if (std::optional<StallVerdict> v = progress_.check()) on_stall(*v);
  }

  void spawned(int local_rank, pid_t pid) override {
    progress_.started(local_rank, ctl_.info().base_rank + local_rank, pid);
  }
  void output(int local_rank) override { progress_.note_output(local_rank); }
  void exited(WorkerExit& w) override { progress_.exited(w.local_rank); }

  // With the runtime's heartbeats: where each rank is in the sequence of collectives.
  std::string stack_note() const override { return progress_.collective_summary(); }

  // The straggler's exit (once reaped) marked as stalled.
  std::optional<WorkerExit> root_cause(const AttemptResult& r) const override {
    if (!stall_) return std::nullopt;
    return stalled_exit(r);
  }

 private:
  void on_stall(const StallVerdict& v) {
    // The teardown may take the whole --shutdown_timeout: a SIGTERM handler
    // that starts a collective (Lightning's) waits for the stalled rank too.
    ctl_.log() << "ddp-launch: " << v.message << "; stopping the group: SIGTERM now, SIGKILL to any rank still there after "
               << ddp::seconds_text(ctl_.info().plan.opts.shutdown_timeout_s) << " (--shutdown_timeout)" << std::endl;
    ctl_.dump_stacks("stalled");
    stall_ = v;
    ctl_.fail(stalled_exit(ctl_.result()));
  }

  WorkerExit stalled_exit(const AttemptResult& r) const {
    WorkerExit w;
    w.pid = stall_->straggler.pid;
    w.rank = stall_->straggler.rank;
    w.local_rank = stall_->straggler.local_rank;
    w.time = std::chrono::system_clock::now();
    for (const WorkerExit& e : r.exits)
      if (e.pid == w.pid) w = e;
    w.stalled = stall_->message;
    w.stalled_idle_s = stall_->idle_s;
    return w;
  }

  AttemptControl& ctl_;
  ProgressWatch progress_;
  std::optional<StallVerdict> stall_;
};

}  // namespace

std::unique_ptr<Feature> make_stalls(AttemptControl& ctl) { return std::make_unique<Stalls>(ctl); }

}  // namespace ddp::launcher
