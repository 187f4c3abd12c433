#pragma once
// One attempt of the group: spawn every worker, serve the attempt's loop
// until no process of its groups is left, and say how it ended. The
// attempt owns the processes (WorkerGroup), the loop (EventLoop), the
// policies (Outcome over Teardown) and its features (features/features.h);
// the features reach it only through AttemptControl. It makes each
// worker's heartbeat page (heartbeat_pages.h) before its features hear of
// the worker, so no feature owns what several read.
//  - spawning serves the loop after every worker, so a SIGTERM or a failure
//    during the start of thousands of workers is not ignored;
//  - an attempt ends only when no process of its groups is left, so a
//    restart never meets the old group's processes (a DataLoader child
//    holding MASTER_PORT); a process still there kAfterKillWaitS after
//    SIGKILL (D state) is named from /proc and left behind (unkillable.h);
//  - the stacks of every running worker are dumped on SIGQUIT before it is
//    forwarded, on SIGUSR2 unless it is a handled signal (a live dump:
//    nothing else happens), and before the SIGKILL of workers that outlived
//    the grace period;
//  - with --recovery in_place a standby process (standby.h), once asked for
//    (start_standby), waits with its libraries loaded; a respawn adopts it
//    when it can (WorkerGroup::adopt), else spawns, and the standby ends
//    with the attempt (SIGKILL at the teardown's start or the attempt's end);
//  - a watchdog that dies (reaped like any child, told apart by its pid) is
//    replaced at once, with one warning line, and told the live groups.

#include "ddp/launcher/process/event_loop.h"
#include "ddp/launcher/process/signals.h"
#include "ddp/launcher/process/standby.h"
#include "ddp/launcher/process/watchdog.h"
#include "ddp/launcher/process/worker_group.h"
#include "ddp/launcher/supervise/feature.h"
#include "ddp/launcher/supervise/outcome.h"
#include "ddp/launcher/supervise/stack_dumps.h"
#include "ddp/launcher/supervise/teardown.h"

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

namespace ddp::launcher {

class Attempt final : public AttemptControl {
 public:
  Attempt(const LaunchPlan& plan, RunDirectory& dir, SignalChannel& signals, Watchdog& watchdog, int attempt,
          Placement placement, RunServices& services, bool stdin_to_rank0, std::ostream& log);
  ~Attempt() override;

  AttemptResult run();

  // AttemptControl
  const AttemptInfo& info() const override { return info_; }
  std::ostream& log() override { return log_; }
  bool stopping() const override { return teardown_.stopping(); }
  bool killed() const override { return teardown_.killed(); }
  bool fail(const WorkerExit& cause) override;
  void stop(const std::string& reason) override;
  void dump_stacks(const std::string& why) override { dump_stacks(why, DumpKind::Cause); }
  void dump_stacks(const std::string& why, DumpKind kind);
  void worker_output(int local_rank) override;
  int local_rank_of_group(pid_t pgid) const override;
  pid_t worker_pid(int local_rank) const override;
  bool respawn(int local_rank, const EnvMap& extra_env) override;
  void start_standby() override;
  void record_recovery(const Recovery& r) override;
  void tell_recovery_generation(int local_rank, uint64_t generation) override {
    pages_.tell_recovery_generation(local_rank, generation);
  }
  const AttemptResult& result() const override { return result_; }
  const HeartbeatPages& pages() const override { return pages_; }

 private:
  // What the attempt remembers of a running worker.
  struct Live {
    int local_rank = 0;
    std::string error_file;
    std::string stdout_log, stderr_log;  // "" when that stream is not in a file
    std::chrono::steady_clock::time_point start;
  };
  class SignalSource;
  class TeardownSource;

  void start_workers();
  bool start_worker(int local_rank, GroupSpec& spec, std::string& attempt_log_dir, const EnvMap& extra_env = {});
  void spawn_failed(int local_rank, const SpawnError& e);
  void on_signals();
  void reap();
  void worker_exited(const WorkerGroup::Event& e, const Live& live, bool after_teardown);
  pid_t spawn_or_adopt(SpawnSpec spec, int local_rank);
  void standby_died(const WorkerGroup::Event& e);
  void teardown_due();

  const LaunchPlan& plan_;
  Watchdog& watchdog_;
  SignalChannel& signals_;
  Placement placement_;
  AttemptInfo info_;
  bool stdin_to_rank0_;
  std::ostream& log_;
  WorkerGroup group_;
  Standby standby_;       // --recovery in_place: a respawn's process, pre-started
  int standby_deaths_ = 0;  // its unexpected ends this attempt (after two, none is started again)
  Teardown teardown_;
  Outcome outcome_;
  StackDumps stacks_;
  EventLoop loop_;
  std::unique_ptr<SignalSource> signal_source_;
  std::unique_ptr<TeardownSource> teardown_source_;
  HeartbeatPages pages_;  // before the features: they read it
  std::vector<std::unique_ptr<Feature>> features_;
  AttemptResult result_;
  std::map<pid_t, Live> live_;
  std::vector<pid_t> started_;  // by local rank
  GroupSpec spec_;               // what start_workers() started them with (a respawn reuses it)
  std::string attempt_log_dir_;
  std::optional<WorkerExit> spawn_failure_;
  std::optional<DumpKind> report_dump_;  // the kind of the dump in result_.stacks
  bool gave_up_ = false;
};

}  // namespace ddp::launcher
