#pragma once
// An attempt's stack dumps (diagnose/stack_dump.h) of every worker still
// running: on SIGQUIT before it is forwarded, on SIGUSR2 (a live dump), on a
// stall, and before the SIGKILL of workers that outlived the grace period.
// The files go into the attempt's --log_dir directory, else the run
// directory, which is then kept so they outlive the launcher. The summary
// goes to the log at once and, as the attempt's last dump, into the failure
// report.

#include "ddp/launcher/process/watchdog.h"
#include "ddp/launcher/supervise/feature.h"

#include <map>
#include <ostream>
#include <string>
#include <sys/types.h>

namespace ddp::launcher {

class StackDumps {
 public:
  StackDumps(const AttemptInfo& info, Watchdog& watchdog, std::ostream& log)
      : info_(info), watchdog_(watchdog), log_(log) {}

  // Stacks of `workers` (pid -> local rank). `why` starts with a word that
  // names the files: "SIGQUIT: ..." -> stacks.sigquit.<n>.rank_<r>.txt.
  // `note` ends the summary (where each rank is in its collectives). Returns
  // the report's block, "" when no worker runs.
  std::string dump(const std::string& why, const std::map<pid_t, int>& workers, const std::string& note);

 private:
  const AttemptInfo& info_;
  Watchdog& watchdog_;
  std::ostream& log_;
  int count_ = 0;  // dumps taken in this attempt (they name the files)
};

}  // namespace ddp::launcher
