#pragma once
// The run summary: at the end of every run one table, per rank of the last
// attempt, of exit status, wall time, CPU time and peak RSS (all from
// wait4's rusage and the launcher's own clock; nothing is measured for it),
// and, when ranks marked steps on their heartbeat pages, their steps: how
// many, the median and p90 wall time a step, the median own work a step,
// the share spent waiting in collectives and the relative score
// (straggler_scores.h); a status cell says what features concluded
// (verdict.h: "SIGABRT in exit"),
// and the same for every attempt as JSON for tools (--summary_json, written
// atomically by the supervisor). Formatting is pure, so tests check it
// without processes.

#include "ddp/launcher/report/report.h"

#include <string>
#include <vector>

namespace ddp::launcher {

struct RunTotals {
  int exit_code = 0;      // the launcher's exit code
  double wall_s = 0;      // the whole run, every attempt
  std::string host;
  std::string log_dir;    // the run's log directory, "" when none
  bool summary_json = false;  // --summary_json was given
  // The job may span nodes (--nnodes above 1): each launcher's scores
  // compare its own node's ranks only, so the column says so.
  bool several_nodes = false;
};

// Rows beyond this many are counted in one line (the JSON has them all).
constexpr int kSummaryRows = 64;

// The table for the last attempt, sorted by rank; "" when there was none.
std::string format_run_summary(const std::vector<AttemptResult>& attempts, const RunTotals& totals);

// {"exit_code", "wall_s", "host", "log_dir", "attempts": [{"attempt",
//  "exit_code", "workers": [{"rank", "local_rank", "pid", "started",
//  "exit_code", "signal", "wall_s", "cpu_s", "max_rss_kb", "error_file",
//  "stdout_log", "stderr_log", "steps": null or {"steps", "steps_per_s",
//  "step_ms_median", "step_ms_p90", "work_ms_median", "wait_share",
//  "relative_score", "individual_score"}, "verdicts" (only when a feature's
//  verdict has a key, verdict.h): {"<key>": value}}], "not_killed" (only when some were):
//  [{"rank", "pid", "worker", "state", "wchan"}]}]}; workers sorted by rank. error_file is
//  the file the worker wrote, null when none (or when it was removed at exit).
std::string format_summary_json(const std::vector<AttemptResult>& attempts, const RunTotals& totals);

}  // namespace ddp::launcher
