#pragma once
// Runs a plan: sets up what every attempt shares (the signalfd, the private
// run directory and its watchdog, the services of run_services.h; the launcher
// becomes a child subreaper, so orphaned descendants of workers are reaped
// too), runs attempts (attempt.h) under the restart policy, static or c10d
// (elastic_run.h), and ends the run (run_end.h). What an attempt does, and
// what each of its features adds, is in attempt.h, outcome.h, teardown.h and
// features/features.h; docs/architecture.md draws the whole.

#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/report/report.h"

#include <memory>
#include <ostream>
#include <vector>

namespace ddp::launcher {

struct Placement;

// Whether the launcher hosts the workers' store (workers_store.h): a
// single node's static run (one store for the run) and c10d rounds (the
// round's node rank 0, a fresh store each round). Static runs of several
// nodes and srun-per-rank tasks keep rank 0's (docs/migration.md).
bool hosts_workers_store(const LaunchOptions& o);

class Supervisor {
 public:
  Supervisor(LaunchPlan plan, std::ostream& log);
  ~Supervisor();

  // Runs every attempt; prints restart lines and the final failure report to
  // `log`. Returns the launcher's exit code: 0, the root cause's shell-style
  // code (128+N for signal N), or 128+N when the launcher got signal N.
  int run();

  const std::vector<AttemptResult>& attempts() const { return attempts_; }

 private:
  struct Run;
  void set_up();
  void run_static();
  AttemptResult attempt(int n, const Placement& placement);
  // Binds run_->services.workers_store at `port` (0: a free one).
  void bind_workers_store(int port);

  LaunchPlan plan_;
  std::ostream& log_;
  std::unique_ptr<Run> run_;
  std::vector<AttemptResult> attempts_;
};

}  // namespace ddp::launcher
