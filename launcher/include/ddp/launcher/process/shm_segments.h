#pragma once
// The shared-memory segments a worker may leave behind. The worker runtime's
// allreduce (worker/src/shm_allreduce.h) makes one segment per process
// group in /dev/shm, named (ddp/common/shm_name.h, the form both sides share)
//     /dev/shm/ddp-shm-<pid of the group's rank 0>-<random>
// and unlinks the name once every rank has mapped it (a few ms after the
// start). A kill in that window (a SIGKILL or Ctrl-C of the launcher, a
// worker that dies) leaks the segment (4 MiB for two ranks) until reboot.
// So whoever outlives a worker removes that worker's segments: the launcher
// once the worker's process group is gone (WorkerGroup), the watchdog after
// a launcher's death (watchdog.h). Only names of that form, only of the
// given pids (the launcher's own workers, never another job's), only regular
// files owned by our effective uid, never following a symlink. A pid is the
// same number for the worker and the launcher only in one pid namespace,
// which is how the launcher starts its workers.

#include <set>
#include <sys/types.h>

namespace ddp::launcher {

// Removes /dev/shm/ddp-shm-<pid>-* for each of `pids`. Returns how many it
// removed; never throws (a /dev/shm that is absent or unreadable removes
// nothing). Async-signal-unsafe (opendir): not for a vfork child.
int remove_worker_segments(const std::set<pid_t>& pids, const char* dir = "/dev/shm");

}  // namespace ddp::launcher
