#pragma once
// Malloc settings for every program that links the runtime, applied once
// before main by a static initializer (the link carries -u for it, so the
// object is always pulled from the archive).
//
// Why: a training step allocates and frees the same set of multi-MiB tensors
// (activations, gradients). With glibc's defaults each of those above the
// dynamic mmap threshold (128 KiB at start) is mmap'ed and unmapped per step,
// and the heap top is trimmed back to the kernel whenever more than twice the
// threshold is free, so every step faults its working set in again (ddp-train
// measured: epoch 1 at 40% of the later epochs' speed, sys time ~45% of user
// time). The fix keeps freed memory for reuse: mmap only above 64 MiB, trim
// only above 128 MiB free.
//
// The user's own choice wins: nothing is changed when GLIBC_TUNABLES sets a
// glibc.malloc.* threshold, when MALLOC_MMAP_THRESHOLD_ or
// MALLOC_TRIM_THRESHOLD_ is set, or when DDP_MALLOC_TUNING=0.

#include <cstddef>
#include <string>

namespace ddp::worker {

struct MallocTuning {
  bool applied = false;           // mallopt succeeded for both settings
  std::size_t mmap_threshold = 0;  // bytes, when applied
  std::size_t trim_threshold = 0;  // bytes, when applied
  std::string skipped_because;     // why not applied ("" when applied)
};

inline constexpr std::size_t kMmapThreshold = std::size_t{64} << 20;
inline constexpr std::size_t kTrimThreshold = std::size_t{128} << 20;

// What the start-up hook did in this process.
const MallocTuning& malloc_tuning();

}  // namespace ddp::worker
