#pragma once
// How the test set is split across ranks for evaluation. Unlike
// DistributedSampler, which pads the last rank with repeated samples so all
// ranks get equally many, this gives each rank one contiguous, disjoint
// slice, so summing per-rank counts covers every sample exactly once.

#include <cstddef>

namespace ddp::loop {

struct Shard {
  std::size_t begin = 0;  // first index
  std::size_t end = 0;    // one past the last
  std::size_t size() const { return end - begin; }
};

// Rank `rank` of `world` gets [n*rank/world, n*(rank+1)/world): sizes differ
// by at most one; ranks beyond n get an empty slice.
inline Shard contiguous_shard(std::size_t n, std::size_t world, std::size_t rank) {
  return Shard{n * rank / world, n * (rank + 1) / world};
}

}  // namespace ddp::loop
