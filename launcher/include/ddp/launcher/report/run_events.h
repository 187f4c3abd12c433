#pragma once
// --event_log_handler console (event_log.h): the events of this run, as
// torchrun's agent records them.

#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/report/event_log.h"
#include "ddp/launcher/report/report.h"

#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

// What every event of this run carries (run id, role, host, rendezvous
// backend, entry point, this node's group rank and the attempt's restarts).
StatusEvent run_event(const LaunchPlan& plan, const std::string& state, const AttemptResult& a);
// A worker's event: the above and its ranks and pid.
StatusEvent worker_event(const LaunchPlan& plan, const std::string& state, const AttemptResult& a, int local_rank,
                         pid_t pid);
// At the end of a run: each worker of the last attempt (unless a signal
// stopped the launcher: torchrun then records only its own failure), then
// the agent's outcome.
std::string final_events(const LaunchPlan& plan, const std::vector<AttemptResult>& attempts,
                         const std::string& rdzv_error, int rdzv_signal, double wall_s);

}  // namespace ddp::launcher
