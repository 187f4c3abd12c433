#pragma once
// training_step: the one call a training program adds to its loop so that the
// launcher sees which step each rank is in. The runtime records the
// collectives by itself (docs/worker-runtime.md, "Progress heartbeat"); the
// step only the program knows. Writes the step into the rank's heartbeat
// (DDP_HEARTBEAT_FILE, set by ddp-launch): one atomic store, no system call,
// no lock; nothing at all when the group has no heartbeat. Never throws.

#include <cstdint>
#include <memory>

#include "ddp/worker/process_group.h"

namespace ddp::worker {

// Call at the start of each training step with its number, counting from 1
// (e.g. the global step, so that it keeps counting across epochs and a
// resume); 0 means "before the first step".
void training_step(ProcessGroup& pg, std::uint64_t step);
inline void training_step(const std::shared_ptr<ProcessGroup>& pg, std::uint64_t step) { training_step(*pg, step); }

}  // namespace ddp::worker
