#pragma once
// The end of every run, whatever ended it: torchrun's final status events,
// the summary table (summary.h), the failure report, --summary_json
// (written atomically), --trace_file (the same), and whether the run directory is kept: when the
// report names error files, flight recorder dumps or stack dumps in it, it
// is kept (and the watchdog told so), so the paths it prints stay valid; a
// job that succeeded after a restart leaves nothing behind.

#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/process/run_dir.h"
#include "ddp/launcher/process/watchdog.h"
#include "ddp/launcher/report/report.h"

#include <ostream>
#include <string>
#include <vector>

namespace ddp::launcher {

class RunTrace;

struct RunEnd {
  std::string host;
  double wall_s = 0;
  std::string rdzv_error;  // c10d: the rendezvous failed (the job's end on this node)
  int rdzv_signal = 0;     // c10d: a signal while waiting on the rendezvous
  const RunTrace* trace = nullptr;  // --trace_file: written here
};

// Writes all of the above to `log` and returns the launcher's exit code.
// Every group is gone: the watchdog is finish()ed here.
int end_run(const LaunchPlan& plan, std::vector<AttemptResult>& attempts, const RunEnd& end, RunDirectory& dir,
            Watchdog& watchdog, std::ostream& log);

}  // namespace ddp::launcher
