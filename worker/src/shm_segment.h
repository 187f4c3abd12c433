#pragma once
// The shared-memory segments of the shared-memory allreduce
// (shm_allreduce.h): rank 0 makes one, the other ranks map it after checking
// it, since its name reaches them through the store, which is open to
// whoever reaches its port (docs/security.md).

#include <cstddef>
#include <string>

namespace ddp::worker {

// A new name for a segment of this process (rank 0):
// /ddp-shm-<its pid>-<a random number>, the form ddp/common/shm_name.h
// defines, by which the launcher removes leaked segments.
std::string new_shm_segment_name();

// Rank 0 makes a new segment (O_EXCL, mode 0600) of `size` bytes, its pages
// reserved now (a /dev/shm too small fails here, not with SIGBUS later), and
// maps it. Null when it cannot.
void* create_shm_segment(const std::string& name, size_t size);

// Another rank maps the segment `name` that rank 0 (pid `pid0`, as rank 0
// posted it) made, after checking it: rank 0's name form, a regular file of
// this user, mode 0600, of `size` bytes. On failure returns null and says
// why: "refused the shared-memory segment N: ..." (it may not be used) or
// "could not map N: ...".
void* open_shm_segment(const std::string& name, const std::string& pid0, size_t size, std::string* problem);

}  // namespace ddp::worker
