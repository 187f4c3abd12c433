#include "ddp/launcher/report/run_events.h"

#include "ddp/launcher/base/host_name.h"

#include <algorithm>
#include <unistd.h>

namespace ddp::launcher {

// --event_log_handler console: what every event of this run carries.
StatusEvent run_event(const LaunchPlan& cfg, const std::string& state, const AttemptResult& a) {
  StatusEvent e;
  e.state = state;
  e.run_id = cfg.opts.run_id;
  e.role = cfg.opts.role;
  e.hostname = host_name();
  e.rdzv_backend = cfg.opts.rdzv.backend;
  const auto slash = cfg.command.exe.rfind('/');
  e.entry_point = slash == std::string::npos ? cfg.command.exe : cfg.command.exe.substr(slash + 1);
  e.group_rank = a.group_rank;
  e.group_world_size = a.group_world_size;
  e.agent_restarts = a.restart_count;
  return e;
}

StatusEvent worker_event(const LaunchPlan& cfg, const std::string& state, const AttemptResult& a, int local_rank,
                         pid_t pid) {
  StatusEvent e = run_event(cfg, state, a);
  e.worker = true;
  e.local_rank = local_rank;
  e.global_rank = a.base_rank + local_rank;
  e.role_world_size = a.world_size;
  e.worker_id = pid;
  return e;
}

// --event_log_handler console at the end of a run: each worker of the last
// attempt (unless a signal stopped the launcher: torchrun then records only
// its own failure), then the agent's outcome.
std::string final_events(const LaunchPlan& cfg, const std::vector<AttemptResult>& attempts,
                         const std::string& rdzv_error, int rdzv_signal, double wall_s) {
  AttemptResult none;
  none.group_rank = cfg.opts.node_rank;
  none.group_world_size = cfg.opts.nnodes;
  const AttemptResult& last = attempts.empty() ? none : attempts.back();
  const int sig = rdzv_signal ? rdzv_signal : last.launcher_signal ? last.launcher_signal : last.signal_during_teardown;
  const long long run_time = static_cast<long long>(wall_s);
  std::string out;
  if (!attempts.empty() && !sig && rdzv_error.empty()) {
    std::vector<WorkerExit> exits = last.exits;
    std::sort(exits.begin(), exits.end(), [](const WorkerExit& a, const WorkerExit& b) { return a.local_rank < b.local_rank; });
    for (const WorkerExit& w : exits) {
      const std::string state = w.failed() ? "FAILED" : last.succeeded() ? "SUCCEEDED" : "TERMINATED";
      StatusEvent e = worker_event(cfg, state, last, w.local_rank, w.pid);
      e.global_rank = w.rank;
      e.total_run_time = run_time;
      if (w.failed()) {
        e.raw_error = event_raw_error(w.error_file);
        e.exit_code = w.signaled ? -w.code : w.code;  // Popen's returncode
        e.worker_pid = w.pid;
      }
      out += format_status_event(e);
    }
  }
  StatusEvent agent = run_event(cfg, sig || !rdzv_error.empty() ? "FAILED" : "SUCCEEDED", last);
  agent.total_run_time = run_time;
  if (sig) agent.raw_error = "SignalException: Process " + std::to_string(::getpid()) + " got signal: " + std::to_string(sig);
  else if (!rdzv_error.empty()) agent.raw_error = rdzv_error;
  return out + format_status_event(agent);
}

}  // namespace ddp::launcher
