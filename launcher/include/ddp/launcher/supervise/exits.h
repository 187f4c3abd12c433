#pragma once
// How an attempt writes down its workers' ends: a reaped exit (its status,
// rusage and error file), a worker that could not be started, and the
// groups SIGKILL could not end.

#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/process/spawn.h"
#include "ddp/launcher/process/watchdog.h"
#include "ddp/launcher/process/worker_group.h"
#include "ddp/launcher/report/report.h"

#include <ostream>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

// A worker's exit as reaped: status, rusage, and for a failure what its
// error file says and when it was written. after_teardown, wall time and
// log paths are the caller's.
WorkerExit reaped_exit(const WorkerGroup::Event& e, int rank, int local_rank, const std::string& error_file);

// The worker of local rank `lr` could not be started: why, and for a refused
// fork how many had started and which limit applies.
WorkerExit spawn_failure(int lr, int base_rank, const LaunchPlan& plan, const SpawnError& e);

// kAfterKillWaitS after SIGKILL: what is still in `groups` is named (state
// and wait channel from /proc, one line each to `log`) and left behind. The
// watchdog forgets those groups (it would wait for them at exit), and their
// shared-memory names are removed as if they had ended. started: the
// workers' pids by local rank.
std::vector<UnkillableProcess> give_up_on_groups(const std::vector<pid_t>& groups, const std::vector<pid_t>& started,
                                                 int base_rank, Watchdog& watchdog, std::ostream& log);

}  // namespace ddp::launcher
