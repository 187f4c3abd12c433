#include "ddp/launcher/supervise/run_end.h"

#include "ddp/common/atomic_file.h"
#include "ddp/common/output_file.h"
#include "ddp/launcher/base/signal_names.h"
#include "ddp/launcher/config/command.h"
#include "ddp/launcher/report/run_events.h"
#include "ddp/launcher/report/summary.h"
#include "ddp/launcher/report/trace_file.h"

namespace ddp::launcher {

namespace {

bool is_in(const std::string& path, const std::string& dir) { return path.rfind(dir + "/", 0) == 0; }

// Whether the failure report of these attempts prints the path of a file in
// `dir`: it prints error_file for each attempt's root cause that wrote one.
bool report_names_file_in(const std::vector<AttemptResult>& attempts, const std::string& dir) {
  for (const AttemptResult& a : attempts)
    if (a.root_cause && a.root_cause->error && is_in(a.root_cause->error_file, dir)) return true;
  return false;
}

// Whether the report lists flight recorder dumps in `dir` (flight_recorder.h).
bool reports_dumps_in(const std::vector<AttemptResult>& attempts, const std::string& dir) {
  for (const AttemptResult& a : attempts)
    for (const std::string& f : a.fr_dumps)
      if (is_in(f, dir)) return true;
  return false;
}

// The attempts without the error files in `dir` (removed at exit), so the
// summary never names a file that is gone.
std::vector<AttemptResult> without_files_in(std::vector<AttemptResult> attempts, const std::string& dir) {
  for (AttemptResult& a : attempts) {
    for (WorkerExit& w : a.exits)
      if (is_in(w.error_file, dir)) w.error.reset();
    if (a.root_cause && is_in(a.root_cause->error_file, dir)) a.root_cause->error.reset();
  }
  return attempts;
}

}  // namespace

int end_run(const LaunchPlan& plan, std::vector<AttemptResult>& attempts, const RunEnd& end, RunDirectory& dir,
            Watchdog& watchdog, std::ostream& log) {
  const std::string& rdzv_error = end.rdzv_error;
  const int rdzv_signal = end.rdzv_signal;
  RunTotals totals;
  totals.exit_code = attempts.empty() ? 0 : attempts.back().exit_code();
  if (!rdzv_error.empty() && totals.exit_code == 0) totals.exit_code = 1;
  if (rdzv_signal) totals.exit_code = 128 + rdzv_signal;
  totals.wall_s = end.wall_s;
  totals.host = end.host;
  totals.log_dir = plan.run_log_dir;
  totals.summary_json = !plan.opts.summary_json.empty();
  totals.several_nodes = plan.opts.nnodes > 1 || plan.opts.rdzv.max_nodes > 1;
  if (plan.opts.event_log_handler == EventLogHandler::Console)
    log << final_events(plan, attempts, rdzv_error, rdzv_signal, totals.wall_s);
  if (!attempts.empty()) log << format_run_summary(attempts, totals);
  if (plan.opts.python_heartbeat)
    if (const std::string flag = python_site_skipped_by(plan.command); !flag.empty())
      log << python_heartbeat_skipped_line(flag) << "\n";
  const bool failed = totals.exit_code != 0;
  // The report prints these paths: they must outlive the launcher (the run
  // directory is otherwise removed at exit, by us and the watchdog). Only
  // then: a job that succeeded after a restart leaves nothing behind.
  const bool names_files = failed && report_names_file_in(attempts, dir.path());
  const bool names_fr_dumps = failed && reports_dumps_in(attempts, dir.path());
  // A stack dump without --log_dir wrote its files into the run directory
  // and kept it (StackDumps::dump), whether the job failed or not.
  const bool has_stacks = dir.kept();
  const bool keep = names_files || names_fr_dumps || has_stacks;
  if (keep) {
    dir.keep();
    watchdog.keep_run_dir();
  }
  // Every group is gone: the watchdog may end now, while the report is
  // written, and is reaped when it goes out of scope.
  watchdog.finish();
  if (failed) log << format_failure_report(attempts, end.host, plan.opts.max_restarts);
  // The watchdog removes it too, at once (whoever comes second finds
  // nothing): the removal (0.2 ms on ext4) overlaps the watchdog's exit
  // instead of coming before it, and the wait for its exit is then ~0.
  dir.remove();
  if (!rdzv_error.empty()) log << "ddp-launch: error: " << rdzv_error << "\n";
  if (rdzv_signal) log << "ddp-launch: stopped by " << signal_name(rdzv_signal) << " while in the rendezvous\n";
  if (keep) {
    std::vector<std::string> kept;
    if (names_files) kept.push_back("error files");
    if (names_fr_dumps) kept.push_back("flight recorder dumps");
    if (has_stacks) kept.push_back("stack dumps");
    std::string what;
    for (size_t i = 0; i < kept.size(); ++i)
      what += (i == 0 ? "" : i + 1 == kept.size() ? " and " : ", ") + kept[i];
    log << "ddp-launch: the " << what << " above are kept in " << dir.path() << " (remove it when done)\n";
  }
  if (!plan.opts.summary_json.empty()) {
    try {
      // A device, FIFO or symlink (/dev/stdout) is written through, never replaced.
      ddp::write_output_file(plan.opts.summary_json,
                             format_summary_json(keep ? attempts : without_files_in(attempts, dir.path()), totals));
    } catch (const ddp::AtomicWriteError& e) {
      log << "ddp-launch: warning: --summary_json not written: " << e.what() << "\n";
    }
  }
  if (end.trace) {
    try {
      ddp::write_output_file(end.trace->path(), end.trace->json());
      log << format_trace_written(*end.trace, plan.opts.python_heartbeat);
    } catch (const ddp::AtomicWriteError& e) {
      log << "ddp-launch: warning: --trace_file not written: " << e.what() << "\n";
    }
  }
  log << std::flush;
  return totals.exit_code;
}

}  // namespace ddp::launcher
