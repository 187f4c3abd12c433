#pragma once
// A capability of an attempt (the tee, heartbeats and stalls, the file
// timer, the rendezvous, OOM verdicts, ...) is one Feature: an object with
// optional hooks, built per attempt by make_features() (features/features.h),
// that talks to the attempt only through AttemptControl. A feature that waits
// on fds or a deadline is also an EventLoop::Source (source()). Attempt,
// its teardown and the loop never name a feature. docs/architecture.md,
// "Adding a feature to the launcher", walks through one.

#include "ddp/launcher/config/placement.h"
#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/config/worker_env.h"
#include "ddp/launcher/output/log_dir.h"
#include "ddp/launcher/process/event_loop.h"
#include "ddp/launcher/process/heartbeat_pages.h"
#include "ddp/launcher/process/run_dir.h"
#include "ddp/launcher/process/spawn.h"
#include "ddp/launcher/report/report.h"

#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

struct RunServices;  // run_services.h

// The facts of one attempt, the same for every feature.
struct AttemptInfo {
  const LaunchPlan& plan;
  RunDirectory& dir;
  const Placement& placement;  // where its workers sit
  RunServices& services;       // the run's, lent to every attempt
  int attempt = 0;
  int base_rank = 0;  // RANK of local rank 0
};

// One worker about to start; features fill in what is theirs.
struct WorkerSlot {
  int local_rank = 0;
  int rank = 0;
  SpawnSpec& spawn;                    // stdout_fd / stderr_fd: where its streams go (-1: the console)
  GroupSpec& group;                    // the attempt's: fr_dump_prefix, timer_file
  const std::string& attempt_log_dir;  // <run_log_dir>/attempt_<n>; "" without log options
  const RankLogPaths& paths;           // its files there (empty without log options)
  std::vector<int>& close_after;       // the child's ends of pipes and files, closed once it runs
  const std::string& heartbeat_file;   // DDP_HEARTBEAT_FILE, "" for none (its page: AttemptControl::pages())
  std::string stdout_log, stderr_log;  // the files its streams are written to, "" when none
};

// What a feature may ask of its attempt: a narrow interface (Attempt is the
// real one).
class AttemptControl {
 public:
  virtual ~AttemptControl() = default;
  virtual const AttemptInfo& info() const = 0;
  virtual std::ostream& log() = 0;
  virtual bool stopping() const = 0;  // the teardown has begun
  virtual bool killed() const = 0;    // the launcher has sent SIGKILL
  // This worker failed (a feature's verdict: a stall, an expired scope).
  // True when it is the failure that ends the attempt (the teardown begins,
  // every feature's failed() hears it); false during a teardown.
  virtual bool fail(const WorkerExit& cause) = 0;
  // The rendezvous asks this node to stop its workers.
  virtual void stop(const std::string& reason) = 0;
  // Stacks of every running worker (why: "stalled", "SIGQUIT: ..."), taken
  // because of what ends the attempt: the report shows this dump.
  virtual void dump_stacks(const std::string& why) = 0;
  // The launcher saw output of this local rank (progress, for stalls).
  virtual void worker_output(int local_rank) = 0;
  // The local rank whose live process group is `pgid`; -1 when none.
  virtual int local_rank_of_group(pid_t pgid) const = 0;
  // Starts the worker of this local rank again in the running attempt, as
  // it was started, with `extra_env` added (in-place recovery). False when
  // it could not be started (the reason is in the log).
  virtual bool respawn(int /*local_rank*/, const EnvMap& /*extra_env*/) { return false; }
  // Pre-starts a standby process (standby.h) that a later respawn() adopts
  // instead of spawning; nothing when one runs, --recovery_standby off or
  // the attempt ends. In-place recovery asks once a rank advertised it.
  virtual void start_standby() {}
  // Writes the recovery generation into this local rank's heartbeat page.
  virtual void tell_recovery_generation(int /*local_rank*/, uint64_t /*generation*/) {}
  // Records an in-place recovery of one rank in the attempt's result (or
  // updates the one of the same generation and local rank).
  virtual void record_recovery(const Recovery& /*r*/) {}
  // The pid of the worker started for this local rank; 0 when none.
  virtual pid_t worker_pid(int local_rank) const = 0;
  // The attempt's result so far (where its workers sit, its exits).
  virtual const AttemptResult& result() const = 0;
  // Every worker's heartbeat page, made by the attempt before any
  // feature's before_spawn (null for a worker without one).
  virtual const HeartbeatPages& pages() const = 0;
};

class Feature {
 public:
  virtual ~Feature() = default;
  // Its fds and deadline in the attempt's loop; nullptr when it has none.
  virtual EventLoop::Source* source() { return nullptr; }
  // Every source it has, in the order the loop serves them: source() by
  // default. A feature that waits on two kinds of fd has a source for each,
  // so none splits its slice of the poll by counting.
  virtual std::vector<EventLoop::Source*> sources() {
    if (EventLoop::Source* s = source()) return {s};
    return {};
  }
  // Its source is served after the attempt has reaped the exits of the same
  // wake (a progress look must not blame a rank that has just exited); by
  // default before (what a worker wrote to a pipe just before it exited is
  // read while its group still exists).
  virtual bool after_reaping() const { return false; }
  // Before a worker starts. Throwing std::runtime_error stops the start:
  // the attempt fails as when the worker cannot be started.
  virtual void before_spawn(WorkerSlot& /*slot*/) {}
  virtual void spawned(int /*local_rank*/, pid_t /*pid*/) {}
  virtual void all_started() {}
  // Output of this local rank was seen (AttemptControl::worker_output).
  virtual void output(int /*local_rank*/) {}
  // Any child that exited was reaped (a worker, or a descendant adopted
  // as subreaper).
  virtual void reaped(pid_t /*pid*/) {}
  // A worker failed while the others run: true when this feature takes
  // the failure over (in-place recovery: it brings the worker back), so the
  // attempt does not fail. Asked in order until one takes it.
  virtual bool take_failure(const WorkerExit& /*w*/) { return false; }
  // A failure it took over waits for an answer with no worker of this node
  // running (c10d in-place recovery, the node's only rank lost: the
  // rendezvous' grant): the attempt neither ends nor tears down meanwhile.
  virtual bool holds_attempt() const { return false; }
  // A worker was reaped: its verdicts go into `w` (w.verdicts, report/verdict.h:
  // shown by the report and the summary as they are; or a typed field).
  virtual void exited(WorkerExit& /*w*/) {}
  // The attempt's first failure, once: tell whom it concerns.
  virtual void failed(const WorkerExit& /*cause*/) {}
  // A line for a stack dump's summary ("" for none).
  virtual std::string stack_note() const { return ""; }
  // The stacks of the running workers were dumped (why: "stalled", ...).
  virtual void stacks_dumped(const std::string& /*why*/) {}
  // No process of the groups is left.
  virtual void drained() {}
  // The attempt's result before its root cause is chosen: what the
  // feature knows of its exits.
  virtual void finish(AttemptResult& /*r*/) {}
  // The root cause this feature decided (a stall's straggler), if any.
  virtual std::optional<WorkerExit> root_cause(const AttemptResult& /*r*/) const { return std::nullopt; }
  // The attempt's result with its root cause.
  virtual void conclude(AttemptResult& /*r*/) {}
};

}  // namespace ddp::launcher
