#pragma once
// Runs the worker group and its restarts. Event driven: one poll on the
// signalfd (SIGCHLD and the forwarded signals) with the shutdown grace as its
// only timeout; no sleep loops. Policy:
//  - the first worker to exit non-zero or die by a signal is the root cause;
//    every worker's process group then gets SIGTERM, and SIGKILL once
//    shutdown_timeout has passed;
//  - SIGINT/SIGTERM/SIGHUP/SIGQUIT are forwarded to every worker's group,
//    then the same grace and kill; a second SIGINT kills at once;
//  - with restarts left, a failed group is restarted whole with
//    TORCHELASTIC_RESTART_COUNT + 1.
// The launcher is a child subreaper, so orphaned descendants of workers are
// reaped too (and never mistaken for workers).

#include "ddp/launcher/command.h"
#include "ddp/launcher/options.h"
#include "ddp/launcher/report.h"

#include <ostream>
#include <vector>

namespace ddp::launcher {

struct SupervisorConfig {
  LaunchOptions opts;
  WorkerCommand command;
  EnvMap parent_env;
  int nproc = 1;
  int omp_threads = 0;  // 0: leave OMP_NUM_THREADS alone
};

class Supervisor {
 public:
  Supervisor(SupervisorConfig cfg, std::ostream& log);

  // Runs every attempt; prints restart lines and the final failure report to
  // `log`. Returns the launcher's exit code: 0, the root cause's shell-style
  // code (128+N for signal N), or 128+N when the launcher got signal N.
  int run();

  const std::vector<AttemptResult>& attempts() const { return attempts_; }

 private:
  SupervisorConfig cfg_;
  std::ostream& log_;
  std::vector<AttemptResult> attempts_;
};

// A port on which a TCP server can listen right now: 0 asks the kernel for a
// free one. Throws UsageError naming the port when it is taken.
int reserve_check_port(int port);

}  // namespace ddp::launcher
