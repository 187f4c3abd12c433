#include "ddp/worker/malloc_tuning.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace ddp::worker {
namespace {

// Runs during static initialization, so it reads the environment with
// getenv directly (ddp_common's helpers may not be initialized yet).
MallocTuning apply_malloc_tuning() {
  MallocTuning t;
  const char* off = std::getenv("DDP_MALLOC_TUNING");
  if (off && std::strcmp(off, "0") == 0) {
    t.skipped_because = "DDP_MALLOC_TUNING=0";
    return t;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if ((tunables && (std::strstr(tunables, "glibc.malloc.mmap_threshold") ||
                    std::strstr(tunables, "glibc.malloc.trim_threshold"))) ||
      std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) {
    t.skipped_because = "malloc thresholds set by the environment";
    return t;
  }
#ifdef __SANITIZE_ADDRESS__
  // AddressSanitizer replaces malloc: mallopt does nothing there.
  t.skipped_because = "AddressSanitizer replaces malloc";
  return t;
#endif
  // Setting either one also turns off glibc's dynamic threshold, so both
  // are always set together.
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThreshold)) == 1 &&
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThreshold)) == 1) {
    t.applied = true;
    t.mmap_threshold = kMmapThreshold;
    t.trim_threshold = kTrimThreshold;
  } else {
    t.skipped_because = "mallopt refused the thresholds";
  }
  return t;
}

const MallocTuning g_tuning = apply_malloc_tuning();

}  // namespace

const MallocTuning& malloc_tuning() { return g_tuning; }

}  // namespace ddp::worker

// Referenced with -u by everything that links ddp_worker (see
// worker/CMakeLists.txt), so the static initializer above is always linked.
extern "C" {
extern const int ddp_worker_malloc_tuning_anchor;
const int ddp_worker_malloc_tuning_anchor = 0;
}
