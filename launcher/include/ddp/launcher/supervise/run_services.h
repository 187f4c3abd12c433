#pragma once
// The run-wide services an attempt's features use: made once by the
// Supervisor (its Run owns them), lent to every attempt as
// AttemptInfo::services. Each is absent when its option is off; a feature
// that needs one is made only when it is there (make_features). Nothing
// here knows an attempt.

#include "ddp/launcher/elastic/job_recovery.h"
#include "ddp/launcher/elastic/job_windows.h"
#include "ddp/launcher/process/workers_store.h"
#include "ddp/launcher/report/trace_file.h"
#include "ddp/launcher/watch/file_timer_server.h"

#include <optional>

namespace ddp::launcher {

class RdzvLink;

struct RunServices {
  // c10d: the rendezvous helper (ElasticRun's, one for the run;
  // rdzv_link.h); null for static rendezvous.
  RdzvLink* agent = nullptr;
  // TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file timer, one FIFO for
  // every attempt.
  std::optional<FileTimerServer> timers;
  // --trace_file: the run's timeline, every attempt's (written by end_run).
  std::optional<RunTrace> trace;
  // c10d: every node's last window of steps (job_windows.h); none for
  // static rendezvous.
  std::optional<JobWindows> job_windows;
  // c10d: in-place recovery across the nodes (job_recovery.h); none for
  // static rendezvous.
  std::optional<JobRecovery> job_recovery;
  // The workers' store hosted here (TORCHELASTIC_USE_AGENT_STORE=True). A
  // single node's static run: one for the whole run, emptied before each
  // attempt. c10d: a fresh one bound before each join, kept for the round
  // when this node is its node rank 0, dropped otherwise.
  std::optional<WorkersStore> workers_store;
};

}  // namespace ddp::launcher
