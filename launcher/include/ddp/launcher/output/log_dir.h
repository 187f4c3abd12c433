#pragma once
// The files of --log_dir, in torchrun's layout:
//   <log_dir>/<run_id>_<random>/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}
// Every directory made here is 0700 and every file 0600 (logs and error
// files can hold data, paths and tokens that other users must not read); a
// --log_dir that already exists is used as it is. Without --log_dir but with
// --redirects/--tee, the base is a fresh $TMPDIR/ddp-launch-logs-XXXXXX (like
// torchrun's torchelastic_XXXXXX), kept after the run. Called only when log
// options are given: a plain launch makes none of these directories.

#include <string>

namespace ddp::launcher {

// Makes the run's directory <base>/<run_id>_XXXXXX. base: the --log_dir
// value ("" for a temporary one); what: how the user gave it, for messages.
// Throws UsageError naming the directory.
std::string make_run_log_dir(const std::string& base, const std::string& what, const std::string& run_id,
                             const std::string& tmpdir);

// <run_log_dir>/attempt_<n>, emptied first (as torchrun does) and made.
// Throws std::runtime_error naming it.
std::string make_attempt_log_dir(const std::string& run_log_dir, int attempt);

struct RankLogPaths {
  std::string dir;         // <attempt>/<local_rank>
  std::string stdout_log;  // <dir>/stdout.log
  std::string stderr_log;  // <dir>/stderr.log
  std::string error_file;  // <dir>/error.json (TORCHELASTIC_ERROR_FILE)
};
// Makes <attempt_dir>/<local_rank> (one there already is used only when it
// is a directory of this user's, not a symlink). Throws std::runtime_error
// naming it.
RankLogPaths make_rank_log_dir(const std::string& attempt_dir, int local_rank);

// Creates a new log file, mode 0600, close-on-exec, append mode; a path that
// exists (a symlink planted there included) is an error, never followed or
// truncated. Throws std::runtime_error naming it.
int open_log_file(const std::string& path);

}  // namespace ddp::launcher
