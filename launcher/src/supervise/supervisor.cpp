#include "ddp/launcher/supervise/supervisor.h"

#include "ddp/launcher/base/host_name.h"
#include "ddp/launcher/elastic/elastic_run.h"
#include "ddp/launcher/process/limits.h"
#include "ddp/launcher/process/run_dir.h"
#include "ddp/launcher/process/signals.h"
#include "ddp/launcher/process/watchdog.h"
#include "ddp/launcher/process/worker_group.h"
#include "ddp/launcher/supervise/attempt.h"
#include "ddp/launcher/supervise/run_end.h"
#include "ddp/launcher/supervise/run_services.h"

#include <chrono>
#include <optional>
#include <sys/prctl.h>
#include <unistd.h>

namespace ddp::launcher {

// What every attempt of a run shares: the signals, the private run
// directory and its watchdog, the services its features use.
struct Supervisor::Run {
  SignalChannel signals;
  RunDirectory dir;  // named, not yet created: the watchdog knows the name first
  std::optional<Watchdog> watchdog;
  RunServices services;
  bool stdin_to_rank0 = false;
  std::string host;

  explicit Run(const LaunchPlan& plan) : signals(plan.opts.signals_to_handle) {}
};

bool hosts_workers_store(const LaunchOptions& o) { return !o.task && (o.rdzv.elastic() || o.nnodes == 1); }

Supervisor::Supervisor(LaunchPlan plan, std::ostream& log) : plan_(std::move(plan)), log_(log) {}
Supervisor::~Supervisor() = default;

int Supervisor::run() {
  const auto started = std::chrono::steady_clock::now();
  set_up();
  RunEnd end;
  end.host = run_->host;
  if (plan_.opts.rdzv.elastic()) {
    ElasticRun elastic(plan_, run_->signals, run_->host, log_);
    elastic.run(
        [this](const RoundPlacement& r) {
          // One helper for the run; a new round's ranks are other workers:
          // the last round's windows say nothing of them.
          run_->services.agent = r.agent;
          if (!run_->services.job_windows) run_->services.job_windows.emplace(*r.agent);
          if (!run_->services.job_recovery) run_->services.job_recovery.emplace(*r.agent);
          run_->services.job_windows->new_round(r.placement ? r.placement->world_size : 0);
          // Every node's launcher serves when it is the round's node rank
          // 0, so every node's workers are told True; the others' stores,
          // bound for the join, are not this round's.
          RoundPlacement p = r;
          auto& store = run_->services.workers_store;
          p.agent_store = hosts_workers_store(plan_.opts);
          if (store && r.placement && r.placement->group_rank != 0) store.reset();
          return attempt(r.attempt, p);
        },
        attempts_,
        [this]() -> int {
          if (!hosts_workers_store(plan_.opts)) return 0;
          // A fresh store per round, bound once this node's workers of the
          // last round are gone: the round's table starts empty and no
          // rank of an old round knows its port.
          run_->services.workers_store.reset();
          bind_workers_store(0);
          return run_->services.workers_store->port();
        });
    end.rdzv_error = elastic.error();
    end.rdzv_signal = elastic.signal();
  } else {
    run_static();
  }
  end.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  end.trace = run_->services.trace ? &*run_->services.trace : nullptr;
  return end_run(plan_, attempts_, end, run_->dir, *run_->watchdog, log_);
}

void Supervisor::set_up() {
  // Adopt orphaned grandchildren so they are reaped here, not left as zombies.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  run_ = std::make_unique<Run>(plan_);
  try {
    run_->watchdog.emplace(run_->dir.path());
  } catch (const SpawnError& e) {
    const std::string limits = process_limit_text(e.errno_value);
    throw std::runtime_error(std::string("cannot start the launcher's watchdog process: ") + e.what() +
                             (limits.empty() ? "" : "; " + limits));
  }
  try {
    run_->dir.create();
  } catch (const std::runtime_error&) {
    run_->watchdog->keep_run_dir();  // the name may be another process's: never removed
    throw;
  }
  run_->stdin_to_rank0 = stdin_is_ours();
  run_->host = host_name();
  if (!plan_.opts.trace_file.empty()) run_->services.trace.emplace(plan_.opts.trace_file, run_->host, monotonic_ns());
  if (!plan_.run_log_dir.empty()) log_ << "ddp-launch: worker logs and error files in " << plan_.run_log_dir << std::endl;
  ensure_fd_limit(launcher_fds_needed(plan_.opts.logs, plan_.nproc));
  // Static: one store for the run, its port bound now (c10d: one per
  // round, bound before each join).
  if (hosts_workers_store(plan_.opts) && !plan_.opts.rdzv.elastic()) bind_workers_store(plan_.opts.master_port);
  // TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file timer, one FIFO for
  // every attempt (removed before the run directory is).
  if (plan_.opts.file_timer)
    run_->services.timers.emplace(plan_.opts.file_timer_path.empty() ? run_->dir.path() + "/" + kTimerPipeName
                                                                     : plan_.opts.file_timer_path);
}

// Static rendezvous: with restarts left, a failed group is restarted whole
// with TORCHELASTIC_RESTART_COUNT + 1; a spawn failure, a launcher signal or
// workers SIGKILL cannot end are never restarted (AttemptResult::restartable).
void Supervisor::run_static() {
  // Restarts and in-place recoveries share --max_restarts, for the job.
  int used = 0;
  for (int n = 0;; ++n) {
    Placement p;
    if (auto& store = run_->services.workers_store) {
      // The launcher's store keeps its port; a dead attempt's keys and
      // clients are gone before the next one's workers start.
      store->new_attempt();
      p.port = store->port();
      p.agent_store = true;
    } else {
      // 0 (--standalone, or port 0 given): a free port per attempt, as --standalone's.
      p.port = plan_.opts.master_port == 0 ? reserve_check_port(0) : plan_.opts.master_port;
    }
    p.restart_count = used;
    attempts_.push_back(attempt(n, p));
    const AttemptResult& a = attempts_.back();
    used += a.recoveries_counted();
    if (a.succeeded() || !a.restartable() || used >= plan_.opts.max_restarts) return;
    ++used;
    log_ << format_restart_line(a, plan_.opts.max_restarts, used) << std::endl;
  }
}

// Port 0 (--standalone, --master_port 0, c10d): a free port outside the
// kernel's ephemeral range (free_port.h), as rank 0 got before; another
// pick when it is taken between the pick and the bind.
void Supervisor::bind_workers_store(int port) {
  WorkersStoreOptions o;
  // One write per line: the store's thread never interleaves with the
  // launcher's own lines.
  o.log = [](const std::string& line) {
    const std::string l = "ddp-launch: " + line + "\n";
    [[maybe_unused]] auto n = ::write(2, l.data(), l.size());
  };
  for (int tries = 1;; ++tries) {
    o.port = port == 0 ? reserve_check_port(0) : port;
    try {
      run_->services.workers_store.emplace(o);
      return;
    } catch (const std::runtime_error&) {
      if (port != 0 || tries == 10) throw;
    }
  }
}

AttemptResult Supervisor::attempt(int n, const Placement& placement) {
  return Attempt(plan_, run_->dir, run_->signals, *run_->watchdog, n, placement, run_->services, run_->stdin_to_rank0,
                 log_)
      .run();
}

}  // namespace ddp::launcher
