#pragma once
// Turns the program named on the command line into the argv each worker
// execs: a .py script runs as `python3 -u script` (PYTHON_EXEC overrides the
// interpreter), -m runs `python3 -u -m module`, anything else (or any program
// with --no_python) is executed directly. Nothing goes through a shell.
// Resolution checks the file system once, before any worker starts, so a
// missing or non-executable program is a usage error (exit 2), not N failed
// workers.

#include "ddp/launcher/config/options.h"

#include <string>
#include <vector>

namespace ddp::launcher {

struct WorkerCommand {
  std::string exe;                // absolute or relative path handed to execve
  std::vector<std::string> args;  // argv[1..] before the per-rank --local_rank
  size_t local_rank_pos = 0;      // where --local_rank=N goes (torch.distributed.launch order)
  bool legacy_local_rank = true;  // false with --use_env
  bool local_rank_dash = false;   // --local-rank=N (2.x) instead of --local_rank=N (1.x)
  // --virtual_local_rank: every worker gets --local_rank=0, as LOCAL_RANK=0
  // (torchrun passes the real one, which names a GPU the worker cannot see).
  bool virtual_local_rank = false;

  // Full argv (without argv[0]) for one worker, ${local_rank} substituted.
  std::vector<std::string> argv_for(int local_rank) const;
};

// PATH lookup like execvp: names with a '/' are taken as paths. Returns "" if
// not found.
std::string find_executable(const std::string& name, const std::string& path_env);

// torchrun's macro: "${local_rank}" (and "$local_rank") in an argument
// becomes the worker's local rank, by the rule of Python's
// string.Template.safe_substitute, which torchrun uses: "$$" is "$", every
// other "$" text stays as written. argv_for applies it to every argument
// (with --virtual_local_rank the local rank is 0, as in --local_rank=0).
std::string substitute_local_rank(const std::string& arg, int local_rank);

WorkerCommand resolve_command(const LaunchOptions& opts, const EnvMap& env);

// The option of the workers' Python that keeps --python_heartbeat's
// sitecustomize from running, "" when none: -S (no `site`), -I (isolated:
// no site-packages of the user, PYTHON* ignored) or -E (PYTHON* ignored, so
// PYTHONPATH too). Read from the command's own arguments when its program is
// a python, else from the #! line of the file it runs (`#!/usr/bin/python3
// -I`, `#!/usr/bin/env -S python3 -I`). Without it the heartbeat is silently
// absent: no stall is ever found on those ranks (issue 51 item 5).
std::string python_site_skipped_by(const WorkerCommand& cmd);

// The warning said at the start and again after the run summary, for
// python_site_skipped_by's `flag`; no newline.
std::string python_heartbeat_skipped_line(const std::string& flag);

}  // namespace ddp::launcher
