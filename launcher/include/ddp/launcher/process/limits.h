#pragma once
// What the launcher checks and raises of the machine's limits before its
// workers start: a free port for the store, and its own open-file limit.

#include "ddp/launcher/config/log_spec.h"

#include <cstddef>

namespace ddp::launcher {

// A port on which a TCP server can listen right now: 0 picks a free one
// outside the kernel's ephemeral range (ddp::pick_free_port). Throws
// UsageError naming a given port when it is taken.
int reserve_check_port(int port);

// The open files a launch of nproc workers holds in the launcher: a relayed
// stderr one per worker (and the relay's own), a tee'd stream two (pipe and
// file) for the whole attempt, plus a margin.
size_t launcher_fds_needed(const LogOptions& logs, int nproc);

// Raises the soft limit of open files towards the hard one when it is below
// `need` (the default 1024 does not do for thousands of workers). Never
// lowers it.
void ensure_fd_limit(size_t need);

}  // namespace ddp::launcher
