#pragma once
// The name of the worker runtime's shared-memory segments, a contract between
// the worker (worker/src/shm_segment.cpp makes them, and checks a name read
// from the store before it maps it) and the launcher
// (launcher/src/process/shm_segments.cpp removes the ones a killed worker
// leaked): /dev/shm/ddp-shm-<pid of the group's rank 0>-<n>, shm_open's name
// "/ddp-shm-<pid>-<n>". Only names: it opens, maps and removes nothing.

#include <sys/types.h>

#include <string>
#include <string_view>

namespace ddp {

// shm_open's name of rank 0's segments up to <n>: "/ddp-shm-<pid>-". `pid`
// as text, as rank 0 posts it to the store.
std::string shm_segment_name_head(std::string_view pid);

// The shm_open name of rank 0's segment number `n`: "/ddp-shm-<pid>-<n>".
std::string shm_segment_name(pid_t pid, unsigned long n);

// The pid in a segment name "ddp-shm-<pid>-<rest>" (a /dev/shm entry; with
// or without shm_open's leading '/'), or 0 when the name is not of that form
// or the pid is not positive. <rest> is not checked: the launcher removes
// whatever a worker of that pid left under the prefix.
pid_t shm_segment_pid(std::string_view name);

}  // namespace ddp
