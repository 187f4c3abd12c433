#pragma once
// Several ranks of one process group as threads of this process, for tests
// of code that takes a ProcessGroup (collectives, DDP and its reducer, a
// training loop): no launcher, no port, no child process, so a multi-rank
// case runs in milliseconds. The ranks meet over one in-memory store
// (c10d's HashStore) and talk Gloo over loopback as separate processes would;
// sums stay on Gloo (no shared-memory segment between threads). The real
// multi-process path (TCPStore, ddp-launch) is what the process-level tests
// check.
#include <functional>
#include <memory>

#include "ddp/worker/process_group.h"

namespace ddp::worker {

// Runs body(rank's group) on world_size threads, rank r on thread r, each
// with RANK = LOCAL_RANK = r of WORLD_SIZE = LOCAL_WORLD_SIZE = world_size,
// on the CPU. Returns when every rank has returned; then rethrows the
// exception of the lowest rank that threw, if any. A rank that throws while
// its peers wait in a collective leaves them to the group's timeout:
// options.timeout, 30 s here unless given (DDP_TIMEOUT_S is not read).
void run_ranks_in_process(int world_size, const std::function<void(const std::shared_ptr<ProcessGroup>&)>& body,
                          InitOptions options = {});

}  // namespace ddp::worker
