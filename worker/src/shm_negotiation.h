#pragma once
// What the shared-memory allreduce's set-ups (shm_allreduce.h) say to each
// other through the c10d store: the negotiation of the group's segment
// (ShmAllreduce::negotiate, shm_negotiation.cpp) and of each shared_buffers
// segment end with every rank posting whether it mapped rank 0's segment.
// Never maps or makes a segment itself (shm_segment.h does).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace ddp::worker::shm {

// A store value as text, and text as a store value.
inline std::string text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
inline std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// The last step of a segment's set-up, on every rank: posts whether this
// rank mapped rank 0's segment (`problem` empty) and waits for every rank's
// word. Returns the first failure ("rank R: why"), "" when all mapped it.
std::string agree_on_mapping(c10d::Store& store, const std::string& prefix, int rank, int world,
                             std::chrono::milliseconds timeout, const std::string& problem, const std::string& name);

}  // namespace ddp::worker::shm
