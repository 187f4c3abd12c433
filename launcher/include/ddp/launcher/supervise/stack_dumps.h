#pragma once
// An attempt's stack dumps (diagnose/stack_dump.h) of every worker still
// running: on SIGQUIT before it is forwarded, on SIGUSR2 (a live dump), on a
// stall, and before the SIGKILL of workers that outlived the grace period.
// The files go into the attempt's --log_dir directory, else the run
// directory, which is then kept so they outlive the launcher. The summary
// goes to the log at once; the failure report shows the one that explains
// the attempt's end (report_dump_replaces).

#include "ddp/launcher/process/watchdog.h"
#include "ddp/launcher/supervise/feature.h"

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <sys/types.h>

namespace ddp::launcher {

// Why a dump was taken, for which one the report shows.
enum class DumpKind {
  Live,      // SIGUSR2: the job goes on
  Shutdown,  // workers still running --shutdown_timeout after the teardown's signal
  Cause,     // what ended the attempt: a stall, the user's SIGQUIT
};

// Whether a dump of kind `next` takes the report's place from the one
// shown (nullopt: none yet). The first Cause dump stays (a stall's dump
// shows where the straggler hung; the shutdown dump after it shows the
// ranks in their SIGTERM handling); a Shutdown dump beats Live ones; a
// later Live dump beats an earlier one.
bool report_dump_replaces(std::optional<DumpKind> shown, DumpKind next);

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
