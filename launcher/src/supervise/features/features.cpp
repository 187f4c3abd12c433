#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/supervise/run_services.h"

namespace ddp::launcher {

std::vector<std::unique_ptr<Feature>> make_features(AttemptControl& ctl) {
  const AttemptInfo& info = ctl.info();
  std::vector<std::unique_ptr<Feature>> f;
  f.push_back(make_worker_output(ctl));
  f.push_back(make_stalls(ctl));
  // --straggler_threshold 0 without --trace_file: nothing is sampled (and
  // the summary has no steps).
  if (info.plan.opts.straggler_threshold > 0 || info.services.trace) f.push_back(make_step_stats(ctl));
  if (info.services.trace) f.push_back(make_trace_events(ctl));
  if (info.services.timers) f.push_back(make_file_timer(ctl));
  if (info.services.agent) f.push_back(make_rendezvous(ctl));
  f.push_back(make_flight_recorder(ctl));
  f.push_back(make_oom_verdict(ctl));
  f.push_back(make_exit_verdict(ctl));
  if (info.plan.opts.event_log_handler == EventLogHandler::Console) f.push_back(make_start_events(ctl));
  // Last: a failure is taken over only after every other feature heard the exit.
  if (info.plan.opts.recovery_in_place && info.plan.opts.max_restarts > 0) f.push_back(make_in_place_recovery(ctl));
  return f;
}

}  // namespace ddp::launcher
