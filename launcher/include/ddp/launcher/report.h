#pragma once
// What happened to the workers, and the failure report the launcher prints:
// the root cause (the first failure observed) of each attempt with rank,
// local rank, pid, host, exit code or signal, time and the worker's own error
// file message. Formatting is pure so tests check it without processes.

#include "ddp/common/error_file.h"

#include <chrono>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

struct WorkerExit {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool signaled = false;  // killed by a signal (code is the signal number)
  int code = 0;           // exit status or signal number
  std::chrono::system_clock::time_point time;
  bool after_teardown = false;  // exited after the launcher began stopping the group
  std::string error_file;
  std::optional<ErrorRecord> error;  // what the worker wrote to error_file
  std::string spawn_error;           // exec failed: why (code is 126/127)
  long max_rss_kb = 0;

  bool failed() const { return signaled || code != 0; }
  int shell_code() const { return signaled ? 128 + code : code; }
  std::string status_text() const;  // "exit code 3" / "signal 11 (SIGSEGV)"
};

struct AttemptResult {
  int attempt = 0;                       // 0-based restart count
  std::optional<WorkerExit> root_cause;  // first failure; none when ok or stopped by a signal
  std::vector<WorkerExit> exits;         // every worker, in exit order
  int launcher_signal = 0;               // signal that stopped the launcher, 0 if none

  bool succeeded() const { return !root_cause && launcher_signal == 0; }
};

// The full report after the last attempt; "" when the job succeeded.
std::string format_failure_report(const std::vector<AttemptResult>& attempts, const std::string& host,
                                  int max_restarts);

// One line for a failed attempt that will be restarted.
std::string format_restart_line(const AttemptResult& a, int max_restarts);

// "2026-11-29 17:50:01 UTC"
std::string format_time(std::chrono::system_clock::time_point t);

}  // namespace ddp::launcher
