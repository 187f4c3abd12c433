#pragma once
// The layout of the shared-memory allreduce's segment (shm_allreduce.h), the
// one contract every rank's mapping of it shares: a header of one cache line
// per rank, then two sets of one 1 MiB slot per rank. Used by the
// negotiation, which sizes the segment, and by the object's barrier and sums.
// Pure arithmetic on a base address: it maps, reads and waits for nothing.

#include <cstddef>
#include <cstdint>

namespace ddp::worker::shm {

inline constexpr size_t kLine = 64;                // one cache line per rank's flag
inline constexpr size_t kChunk = size_t{1} << 20;  // bytes per rank per chunk

// Line 0 unused; line 1 + r: rank r's flag (the last epoch it arrived at)
// and what it is reducing (numel, dtype), so ranks that call with different
// tensors fail together instead of mixing them.
struct RankLine {
  uint64_t epoch;
  int64_t numel;
  int64_t dtype;
  int64_t areas;   // the shared_buffers segment's number, -1: through the slots
  int64_t offset;  // the tensor's byte offset in this rank's area
};

inline size_t header_bytes(int world) { return (kLine * (world + 1) + 4095) / 4096 * 4096; }
inline size_t segment_bytes(int world) { return header_bytes(world) + 2 * static_cast<size_t>(world) * kChunk; }

inline RankLine* rank_line(void* base, int r) {
  return reinterpret_cast<RankLine*>(static_cast<char*>(base) + kLine * (r + 1));
}
// Rank r's slot of slot set `set` (0 or 1).
inline char* slot(void* base, int world, int set, int r) {
  return static_cast<char*>(base) + header_bytes(world) + (static_cast<size_t>(set) * world + r) * kChunk;
}

}  // namespace ddp::worker::shm
