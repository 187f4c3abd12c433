#pragma once
// What happened to the workers, and the failure report the launcher prints:
// the root cause (the earliest failure: the time its error file was written,
// else its exit time; not the first one reaped; never a rank whose error
// file says it only followed another rank's failure) of each attempt with rank,
// local rank, pid, host, exit code or signal, time, peak memory, the
// worker's own error file message (without one: the exception its stderr
// ended with, stderr_failure.h) and, when its streams went to files, the
// paths of its stdout.log/stderr.log. What a worker or another node wrote is
// shown through ddp::visible_text (untrusted_text.h): control bytes and
// bytes that are not UTF-8 as \xNN, never raw. Formatting is pure so tests
// check it without processes.

#include "ddp/common/error_file.h"
#include "ddp/launcher/diagnose/unkillable.h"
#include "ddp/launcher/report/verdict.h"
#include "ddp/launcher/watch/file_timer.h"
#include "ddp/launcher/watch/straggler_scores.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

// The launcher's exit code for a stalled job (as timeout(1)); docs/errors.md.
constexpr int kStallExitCode = 124;

struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool signaled = false;  // killed by a signal (code is the signal number)
  int code = 0;           // exit status or signal number
  std::chrono::system_clock::time_point time;  // when the launcher reaped it
  bool after_teardown = false;  // exited after the launcher began stopping the group
  std::string error_file;
  std::optional<ErrorRecord> error;  // what the worker wrote to error_file
  // When error_file was written (its mtime, ns resolution); the failure's
  // time when present, since a rank can fail first and be reaped last.
  std::optional<std::chrono::system_clock::time_point> error_time;
  std::string spawn_error;           // fork or exec failed: why (code 1, or 126/127)
  long max_rss_kb = 0;               // peak resident memory (wait4), 0 when unknown
  double wall_s = 0;                 // from its start to its reaping (0 when never started)
  double cpu_s = 0;                  // user + system CPU time (wait4), its waited-for children included
  std::string stdout_log;            // its stdout.log / stderr.log under --log_dir, "" when not redirected
  std::string stderr_log;
  // --stall_timeout ended the attempt and this rank is the straggler: the
  // verdict's message (stall_detector.h). Its code is then 124 (timeout(1)'s).
  std::string stalled;
  double stalled_idle_s = 0;  // that verdict's time without progress
  // No error file: the exception line and last frames quoted from the end
  // of its stderr (stderr_failure.h); "" when there was nothing to quote.
  std::string stderr_message;
  std::string stderr_traceback;
  // Its SIGKILL came from the kernel's OOM killer (oom_kill.h): "killed by
  // the kernel's OOM killer (memory.max 24 GiB; peak RSS 23.1 GiB)", else "".
  std::string oom;
  // Its (or its child's) torchrun file-timer scope expired: the launcher
  // sent the scope's signal and ended the attempt; the attempt's exit code is
  // then 124, as timeout(1)'s (file_timer_server.h, docs/errors.md).
  std::optional<ExpiredScope> expired_scope;
  // Its steps, from its heartbeat page (a C++ runtime worker that marked
  // steps; step_stats.cpp): steps/s, time a step, wait share, scores.
  std::optional<RankStepStats> steps;
  // What features concluded about it (died in its exit: exit_verdict.cpp),
  // in the order they said it; shown by the report and the summary as they
  // are (verdict.h).
  std::vector<Verdict> verdicts;

  bool failed() const { return signaled || code != 0 || expired_scope; }
  // Its error file says it failed because another rank did (follows_rank).
  bool follower() const { return error && error->follows_rank.has_value(); }
  // The verdict of this feature, nullptr when it said none.
  const Verdict* verdict(std::string_view feature) const;
  int shell_code() const { return !stalled.empty() ? kStallExitCode : signaled ? 128 + code : code; }
  std::string status_text() const;  // "exit code 3" / "signal 11 (SIGSEGV)"
  // Why it failed, in a few words (the other nodes hear it from c10d's
  // rendezvous): why it could not start, "it stalled (no progress for 5 s)",
  // its expired timer scope, else status_text().
  std::string reason_text() const;
  std::chrono::system_clock::time_point failure_time() const {
    return expired_scope ? expired_scope->expired_at : error_time ? *error_time : time;
  }
};

// The root cause among an attempt's exits: the failed one with the earliest
// failure_time (ties: the one reaped first), leaving out followers (a rank
// that failed because another did) unless only followers failed. nullopt
// when none failed.
std::optional<WorkerExit> earliest_failure(const std::vector<WorkerExit>& exits);

// c10d: a hot spare that took the node rank of a node of the last round
// that did not come back.
struct NodeReplacement {
  int node_rank = 0;
  std::string host, pid;                    // the spare
  std::string replaced_host, replaced_pid;  // the node it replaced
};

// One in-place recovery (supervise/features/recovery.cpp): a lost rank
// brought back while the others kept their state.
struct Recovery {
  int rank = 0;
  int local_rank = 0;
  uint64_t generation = 0;                     // the process group's generation it re-formed under
  std::string cause;                           // the lost worker's status ("SIGKILL", "exit code 1")
  std::chrono::system_clock::time_point lost;  // when the launcher reaped the lost worker
  double seconds = 0;                          // from the loss to the rank back in the job; 0 until then
  uint64_t steps_redone = 0;                   // steps run again (the interrupted one)
  bool completed = false;                      // false: a second failure came first (a full restart followed)
};

struct AttemptResult {
  int attempt = 0;                       // 0-based restart count
  std::optional<WorkerExit> root_cause;  // earliest failure; none when ok or stopped by a signal
  std::vector<WorkerExit> exits;         // every worker, in exit order
  int launcher_signal = 0;               // signal that stopped a healthy group, 0 if none
  // A signal that arrived while a failure was being torn down: forwarded,
  // ends the job (no restart), but the root cause keeps its exit code.
  int signal_during_teardown = 0;
  bool spawn_failed = false;             // a worker could not be started: no restart
  // c10d: why the rendezvous stopped this node's healthy workers (another
  // node failed, left, or waits to join; the job was ended), "" if it did not.
  std::string rdzv_stop;
  bool rdzv_counted = true;              // that restart counts against --max_restarts
  bool rdzv_abort = false;               // the job was ended: no restart
  bool rdzv_told_failure = false;        // c10d: this node told the rendezvous of its own failure
  // Where this attempt's workers sat (for --event_log_handler's events).
  int restart_count = 0;                 // TORCHELASTIC_RESTART_COUNT
  int group_rank = 0;
  int group_world_size = 1;
  int world_size = 1;
  int base_rank = 0;                     // RANK of local rank 0
  std::vector<NodeReplacement> replaced;  // c10d: this attempt's round's hot spares
  // Processes of its groups still there a few seconds after SIGKILL
  // (unkillable.h): the attempt ended without them and is not restarted (a
  // new group would meet them holding their GPUs, ports and files).
  std::vector<UnkillableProcess> unkillable;
  // Ranks whose worker was never started: the attempt was stopped (a
  // failure, a signal) while it was starting its workers.
  std::vector<int> never_started;
  // Flight recorder dumps this attempt's workers wrote (flight_recorder.h),
  // and the prefix they were written under.
  std::vector<std::string> fr_dumps;
  std::string fr_prefix;
  // The attempt's stack dump that explains its end (supervise/stack_dumps.h's
  // report_dump_replaces; diagnose/stack_dump.h): "Stacks (why; N ranks,
  // T s):\n" and format_stack_summary's lines; "" when none was taken.
  std::string stacks;
  // In-place recoveries during the attempt, one a rank brought back, in
  // order; each generation (one recovery, however many ranks it brought
  // back together) counts against --max_restarts like a restart. Their lost
  // workers' exits are not in `exits` (they ended no attempt).
  std::vector<Recovery> recoveries;
  // c10d: the job's restarts and in-place recoveries as of this node's last
  // recovery or refusal, from the rendezvous (every node's before it); 0:
  // none here. Another node's later recovery is that node's to count: its
  // "no restarts left" ends the job on every node.
  int restarts_used = 0;
  int recoveries_counted() const {
    int n = 0;
    for (size_t i = 0; i < recoveries.size(); ++i)
      if (i == 0 || recoveries[i].generation != recoveries[i - 1].generation) ++n;
    return n;
  }

  bool succeeded() const { return !root_cause && launcher_signal == 0 && rdzv_stop.empty(); }
  bool restartable() const {
    return root_cause && !launcher_signal && !signal_during_teardown && !spawn_failed && unkillable.empty();
  }
  // The launcher's exit code for this attempt.
  int exit_code() const;
};

// The full report after the last attempt; "" when the job succeeded.
std::string format_failure_report(const std::vector<AttemptResult>& attempts, const std::string& host,
                                  int max_restarts);

// One line for a failed attempt that will be restarted.
// `restart`: the restart it starts, counting in-place recoveries (0: attempt + 1).
std::string format_restart_line(const AttemptResult& a, int max_restarts, int restart = 0);


}  // namespace ddp::launcher
