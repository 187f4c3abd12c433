#pragma once
// Every feature of an attempt, one factory function each (one class in one
// file of features/), and make_features(), the one list of them: a new
// feature is its file and one line there. The order is the order of their
// hooks (and of their sources in the loop, after the attempt's own).

#include "ddp/launcher/supervise/feature.h"

#include <memory>
#include <vector>

namespace ddp::launcher {

// Where each worker's stdout and stderr go (files, the tee, /dev/null, the
// stderr relay), --duplicate_*_filters, and each failed worker's stderr
// tail quoted when it left no error file.
std::unique_ptr<Feature> make_worker_output(AttemptControl& ctl);
// --stall_timeout: a rank without progress (heartbeat pages, CPU time, output) ends the attempt.
std::unique_ptr<Feature> make_stalls(AttemptControl& ctl);
// Steps and waits from the heartbeat pages: straggler verdicts
// (--straggler_threshold), the summary's step columns, the trace's slices.
std::unique_ptr<Feature> make_step_stats(AttemptControl& ctl);
// --trace_file: the launcher's events on the run's timeline.
std::unique_ptr<Feature> make_trace_events(AttemptControl& ctl);
// torchrun's file timer (TORCHELASTIC_ENABLE_FILE_TIMER=1).
std::unique_ptr<Feature> make_file_timer(AttemptControl& ctl);
// c10d: the rendezvous hears this node's failure and may stop its workers.
std::unique_ptr<Feature> make_rendezvous(AttemptControl& ctl);
// PyTorch's flight recorder pointed into the run, and its dumps listed.
std::unique_ptr<Feature> make_flight_recorder(AttemptControl& ctl);
// A SIGKILL the launcher did not send, checked against the OOM killer.
std::unique_ptr<Feature> make_oom_verdict(AttemptControl& ctl);
// A signal after the worker's program had finished: it died in its exit.
std::unique_ptr<Feature> make_exit_verdict(AttemptControl& ctl);
// --event_log_handler console: START for each worker.
std::unique_ptr<Feature> make_start_events(AttemptControl& ctl);

// --recovery in_place: a lost rank is brought back alone while the others keep their state.
std::unique_ptr<Feature> make_in_place_recovery(AttemptControl& ctl);

// The features this attempt's plan and setup ask for.
std::vector<std::unique_ptr<Feature>> make_features(AttemptControl& ctl);

}  // namespace ddp::launcher
