#include "ddp/launcher/supervise/attempt.h"

#include "ddp/common/duration_text.h"
#include "ddp/launcher/base/signal_names.h"
#include "ddp/launcher/diagnose/unkillable.h"
#include "ddp/launcher/supervise/exits.h"
#include "ddp/launcher/supervise/features/features.h"

#include <algorithm>
#include <sys/wait.h>
#include <unistd.h>

namespace ddp::launcher {

// The signalfd: forwarded signals and SIGCHLD. Reaping only then: reap()
// signals every group to see which are empty, which chatty output must not
// cost each time.
class Attempt::SignalSource final : public EventLoop::Source {
 public:
  explicit SignalSource(Attempt& a) : a_(a) {}
  void fds(std::vector<int>& out) override { out.push_back(a_.signals_.fd()); }
  void ready(const pollfd*, size_t) override { a_.on_signals(); }

 private:
  Attempt& a_;
};

// The teardown's grace period and the wait after SIGKILL.
class Attempt::TeardownSource final : public EventLoop::Source {
 public:
  explicit TeardownSource(Attempt& a) : a_(a) {}
  std::optional<EventLoop::Clock::time_point> deadline() override { return a_.teardown_.deadline(); }
  void due() override { a_.teardown_due(); }

 private:
  Attempt& a_;
};

Attempt::Attempt(const LaunchPlan& plan, RunDirectory& dir, SignalChannel& signals, Watchdog& watchdog, int attempt,
                 Placement placement, RunServices& services, bool stdin_to_rank0, std::ostream& log)
    : plan_(plan),
      watchdog_(watchdog),
      signals_(signals),
      placement_(std::move(placement)),
      info_{plan, dir, placement_, services, attempt,
            placement_.placement ? placement_.placement->base_rank : plan.opts.node_rank * plan.nproc},
      stdin_to_rank0_(stdin_to_rank0),
      log_(log),
      group_(signals.original_mask(), &watchdog),
      standby_(signals.original_mask(), &watchdog),
      teardown_(group_, plan.opts.shutdown_timeout_s, kAfterKillWaitS),
      outcome_(group_, teardown_),
      stacks_(info_, watchdog, log) {
  result_.attempt = attempt;
  result_.restart_count = placement_.restart_count;
  result_.group_rank = placement_.placement ? placement_.placement->group_rank : plan.opts.node_rank;
  result_.group_world_size = placement_.placement ? placement_.placement->group_world_size : plan.opts.nnodes;
  result_.world_size = placement_.placement ? placement_.placement->world_size : plan.opts.nnodes * plan.nproc;
  result_.base_rank = info_.base_rank;
  // The order of a wake: the features' fds (a file-timer request or output
  // a worker wrote just before it exited is read while its group exists),
  // then signals and reaping, then the features that must see those exits
  // first (Feature::after_reaping), then the teardown's deadline.
  features_ = make_features(*this);
  signal_source_ = std::make_unique<SignalSource>(*this);
  teardown_source_ = std::make_unique<TeardownSource>(*this);
  for (bool after : {false, true}) {
    for (auto& f : features_)
      if (f->after_reaping() == after)
        for (EventLoop::Source* s : f->sources()) loop_.add(*s);
    if (!after) loop_.add(*signal_source_);
  }
  loop_.add(*teardown_source_);
}

Attempt::~Attempt() = default;

AttemptResult Attempt::run() {
  start_workers();
  for (auto& f : features_) f->all_started();
  const auto held = [this] {
    return std::any_of(features_.begin(), features_.end(), [](const auto& f) { return f->holds_attempt(); });
  };
  while ((!group_.empty() || held()) && !gave_up_) {
    if (group_.running_workers() == 0 && !held()) teardown_.workers_gone();
    if (teardown_.stopping()) standby_.stop();  // no respawn follows
    loop_.run_once();
  }
  standby_.stop();
  for (auto& f : features_) f->drained();
  // Stopped while starting: the workers after the last started (or failed to start) never were.
  for (int lr = static_cast<int>(started_.size()) + (spawn_failure_ ? 1 : 0); lr < plan_.nproc; ++lr)
    result_.never_started.push_back(info_.base_rank + lr);
  for (auto& f : features_) f->finish(result_);
  std::optional<WorkerExit> claimed;
  for (auto& f : features_)
    if (!claimed) claimed = f->root_cause(result_);
  result_.root_cause = Outcome::root_cause(spawn_failure_, claimed, outcome_.failure_seen(), result_.exits);
  result_.launcher_signal = outcome_.launcher_signal();
  result_.signal_during_teardown = outcome_.signal_during_teardown();
  for (auto& f : features_) f->conclude(result_);
  return result_;
}

void Attempt::start_workers() {
  GroupSpec& spec = spec_;
  spec.opts = &plan_.opts;
  spec.nproc = plan_.nproc;
  spec.master_port = placement_.port;
  spec.restart_count = placement_.restart_count;
  spec.agent_store = placement_.agent_store;
  spec.recovery_generation = placement_.recovery_generation;
  spec.placement = placement_.placement;
  spec.omp_threads = plan_.omp_threads;
  std::string& attempt_log_dir = attempt_log_dir_;
  for (int lr = 0; lr < plan_.nproc && !teardown_.stopping(); ++lr) {
    if (!start_worker(lr, spec, attempt_log_dir)) return;
    // Starting thousands of workers takes a while: signals and early
    // failures are handled as they come, not after the last spawn.
    loop_.run_once(EventLoop::Clock::now());
  }
}

// Returns false when it could not be started (the attempt then fails).
bool Attempt::start_worker(int lr, GroupSpec& spec, std::string& attempt_log_dir, const EnvMap& extra_env) {
  std::vector<int> close_after;  // the child's ends of its log files and pipes
  try {
    RankLogPaths paths;
    Live live;
    live.local_rank = lr;
    if (plan_.run_log_dir.empty()) {
      live.error_file = info_.dir.error_file(result_.attempt, lr);
    } else {
      if (attempt_log_dir.empty()) attempt_log_dir = make_attempt_log_dir(plan_.run_log_dir, result_.attempt);
      paths = make_rank_log_dir(attempt_log_dir, lr);
      live.error_file = paths.error_file;
    }
    SpawnSpec s;
    s.exe = plan_.command.exe;
    s.args = plan_.command.argv_for(lr);
    if (!plan_.cpu_binding.empty()) s.cpus = plan_.cpu_binding[static_cast<size_t>(lr)];
    std::string heartbeat_file;
    if (const int fd = pages_.create(lr); fd >= 0) {
      heartbeat_file = Heartbeat::fd_path(fd);
      s.inherit_fds.push_back(fd);
    }
    if (const std::string warning = pages_.take_warning(); !warning.empty()) log_ << warning << std::endl;
    WorkerSlot slot{lr, info_.base_rank + lr, s, spec, attempt_log_dir, paths, close_after, heartbeat_file, "", ""};
    for (auto& f : features_) f->before_spawn(slot);
    live.stdout_log = slot.stdout_log;
    live.stderr_log = slot.stderr_log;
    s.env = worker_environment(plan_.parent_env, spec, lr, live.error_file, heartbeat_file);
    for (const auto& [k, v] : extra_env) s.env[k] = v;
    live.start = std::chrono::steady_clock::now();
    const pid_t pid = spawn_or_adopt(std::move(s), lr);
    for (int fd : close_after) ::close(fd);
    pages_.started(lr);
    live_[pid] = live;
    if (static_cast<size_t>(lr) < started_.size()) started_[static_cast<size_t>(lr)] = pid;
    else started_.push_back(pid);
    for (auto& f : features_) f->spawned(lr, pid);
    return true;
  } catch (const SpawnError& e) {
    for (int fd : close_after) ::close(fd);
    spawn_failed(lr, e);
  } catch (const std::runtime_error& e) {  // a log directory, file or pipe could not be made
    for (int fd : close_after) ::close(fd);
    spawn_failed(lr, SpawnError(e.what(), 0, true));
  }
  return false;
}

bool Attempt::respawn(int local_rank, const EnvMap& extra_env) {
  if (teardown_.stopping() || local_rank < 0 || static_cast<size_t>(local_rank) >= started_.size()) return false;
  if (started_[static_cast<size_t>(local_rank)] != 0 &&
      live_.count(started_[static_cast<size_t>(local_rank)]))
    return false;  // still running
  return start_worker(local_rank, spec_, attempt_log_dir_, extra_env);
}

// A standby, when there is one, takes the worker; else (or when it cannot)
// a fresh spawn. Throws SpawnError as spawn does.
pid_t Attempt::spawn_or_adopt(SpawnSpec spec, int lr) {
  const bool keeps_stdin = lr == 0 && stdin_to_rank0_;
  if (standby_.pid() != 0) {
    const pid_t standby = standby_.pid();
    std::string why;
    if (const pid_t pid = group_.adopt(standby_, spec, lr, keeps_stdin, why)) {
      log_ << "ddp-launch: rank " << info_.base_rank + lr << " (local_rank " << lr
           << ") starts in the standby process, pid " << pid << " (its libraries already loaded)" << std::endl;
      return pid;
    }
    log_ << "ddp-launch: the standby process (pid " << standby << ") cannot take rank " << info_.base_rank + lr
         << ": " << why << "; starting it afresh" << std::endl;
  }
  return group_.spawn(std::move(spec), lr, keeps_stdin);
}

void Attempt::start_standby() {
  // --numa_binding: a bound rank is never adopted (its CPUs are set before exec).
  if (!plan_.opts.recovery_standby || !plan_.cpu_binding.empty() || teardown_.stopping() || standby_.pid() != 0 ||
      standby_deaths_ >= 2)
    return;
  // The spec of the last local rank: not rank 0, which may keep the stdin;
  // a program whose arguments differ by local rank (--local_rank=N) gets
  // this one's only.
  const int lr = plan_.nproc - 1;
  SpawnSpec s;
  s.exe = plan_.command.exe;
  s.args = plan_.command.argv_for(lr);
  s.env = worker_environment(plan_.parent_env, spec_, lr, "", "");
  try {
    standby_.start(s);
  } catch (const SpawnError& e) {
    standby_deaths_ = 2;
    log_ << "ddp-launch: no standby process for in-place recovery (" << e.what()
         << "); a returning rank starts afresh" << std::endl;
  }
}

// A standby ends unasked (killed, or a program that exits before main):
// one more, then none for this attempt, so a program that cannot stand by
// is not started in a loop.
void Attempt::standby_died(const WorkerGroup::Event& e) {
  if (teardown_.stopping()) return;
  if (++standby_deaths_ < 2) {
    start_standby();
    return;
  }
  log_ << "ddp-launch: the standby process (pid " << e.pid << ") ended before it was needed ("
       << reaped_exit(e, -1, -1, "").status_text() << ") a second time; a returning rank starts afresh in this attempt"
       << std::endl;
}

void Attempt::record_recovery(const Recovery& r) {
  for (Recovery& old : result_.recoveries)
    if (old.generation == r.generation && old.local_rank == r.local_rank) {
      old = r;
      return;
    }
  result_.recoveries.push_back(r);
}

void Attempt::spawn_failed(int lr, const SpawnError& e) {
  const WorkerExit w = spawn_failure(lr, info_.base_rank, plan_, e);
  result_.exits.push_back(w);
  result_.spawn_failed = true;
  spawn_failure_ = w;
  fail(w);
}

bool Attempt::fail(const WorkerExit& cause) {
  if (teardown_.stopping()) return false;
  for (auto& f : features_) f->failed(cause);  // the other nodes hear it before SIGTERM goes out
  return outcome_.failure();
}

void Attempt::stop(const std::string& reason) {
  if (teardown_.stopping()) return;
  log_ << "ddp-launch: stopping this node's workers: " << reason << std::endl;
  outcome_.stop_requested();
}

void Attempt::dump_stacks(const std::string& why, DumpKind kind) {
  std::map<pid_t, int> workers;
  for (const auto& [pid, live] : live_) workers[pid] = live.local_rank;
  std::string note;
  for (auto& f : features_) {
    const std::string n = f->stack_note();
    if (!n.empty()) note += (note.empty() ? "" : "\n  ") + n;
  }
  const std::string block = stacks_.dump(why, workers, note);
  for (auto& f : features_) f->stacks_dumped(why);
  if (block.empty() || !report_dump_replaces(report_dump_, kind)) return;
  result_.stacks = block;
  report_dump_ = kind;
}

void Attempt::worker_output(int local_rank) {
  for (auto& f : features_) f->output(local_rank);
}

int Attempt::local_rank_of_group(pid_t pgid) const {
  const std::vector<pid_t>& live = group_.groups();
  if (pgid <= 0 || std::find(live.begin(), live.end(), pgid) == live.end()) return -1;
  for (size_t lr = 0; lr < started_.size(); ++lr)
    if (started_[lr] == pgid) return static_cast<int>(lr);
  return -1;
}

pid_t Attempt::worker_pid(int local_rank) const {
  return local_rank >= 0 && static_cast<size_t>(local_rank) < started_.size() ? started_[static_cast<size_t>(local_rank)]
                                                                               : 0;
}

void Attempt::on_signals() {
  for (int sig : signals_.drain()) {
    if (!SignalChannel::is_forwarded(sig)) continue;  // SIGCHLD: reaped below
    if (signals_.is_dump_request(sig)) {
      dump_stacks(signal_name(sig) + ": a live dump, the job goes on", DumpKind::Live);
      continue;
    }
    if (sig == SIGQUIT) dump_stacks("SIGQUIT: before forwarding it", DumpKind::Cause);  // Ctrl-\ asks where the ranks are
    outcome_.signal(sig);
  }
  reap();
}

void Attempt::reap() {
  const bool was_stopping = teardown_.stopping();  // for every exit of this batch
  for (const WorkerGroup::Event& e : group_.reap()) {
    if (e.kind == WorkerGroup::Event::Exited)
      for (auto& f : features_) f->reaped(e.pid);
    if (e.is_watchdog) {
      log_ << watchdog_.replace_dead(e.status, group_.groups()) << std::endl;
      continue;
    }
    if (e.kind == WorkerGroup::Event::Exited && standby_.died(e.pid)) {
      standby_died(e);
      continue;
    }
    if (!e.is_worker) continue;  // an orphaned descendant we adopted as subreaper
    auto it = live_.find(e.pid);
    if (it == live_.end()) continue;
    if (e.kind == WorkerGroup::Event::Stopped) {
      log_ << "ddp-launch: rank " << info_.base_rank + it->second.local_rank << " (local_rank "
           << it->second.local_rank << ", pid " << e.pid << ") is stopped by " << signal_name(WSTOPSIG(e.status))
           << "; the job cannot go on until it continues (kill -CONT " << e.pid << ")" << std::endl;
      if (teardown_.stopping()) ::kill(e.pid, SIGCONT);  // it must act on the teardown signal
      continue;
    }
    if (e.kind != WorkerGroup::Event::Exited) continue;
    const Live live = it->second;
    live_.erase(it);
    worker_exited(e, live, was_stopping);
  }
}

void Attempt::worker_exited(const WorkerGroup::Event& e, const Live& live, bool after_teardown) {
  WorkerExit w = reaped_exit(e, info_.base_rank + live.local_rank, live.local_rank, live.error_file);
  w.after_teardown = after_teardown;
  w.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - live.start).count();
  w.stdout_log = live.stdout_log;
  w.stderr_log = live.stderr_log;
  for (auto& f : features_) f->exited(w);
  // A failure a feature takes over (in-place recovery) ends no attempt and
  // is recorded by that feature, not among the attempt's exits.
  if (w.failed() && !teardown_.stopping())
    for (auto& f : features_)
      if (f->take_failure(w)) return;
  result_.exits.push_back(w);
  if (w.failed()) fail(w);
}

void Attempt::teardown_due() {
  const std::optional<EventLoop::Clock::time_point> at = teardown_.deadline();
  if (!at || EventLoop::Clock::now() < *at) return;  // moved since the wait began (a second SIGINT)
  if (teardown_.step() == Teardown::Step::Kill) {
    dump_stacks("shutdown_timeout: still running " + ddp::seconds_text(plan_.opts.shutdown_timeout_s) +
                    " after the teardown signal, before SIGKILL",
                DumpKind::Shutdown);
    teardown_.kill();
    return;
  }
  result_.unkillable = give_up_on_groups(group_.groups(), started_, info_.base_rank, watchdog_, log_);
  gave_up_ = true;
}


}  // namespace ddp::launcher
