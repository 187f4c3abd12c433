// The runtime's malloc settings (malloc_tuning.h) are in force in a program
// that links ddp_worker without calling anything for it: a training step's
// allocation pattern, repeated, faults no pages in once the heap has grown.
// With glibc's defaults (DDP_MALLOC_TUNING=0 restores them) each step
// returns its memory to the kernel and faults it in again: ~6600 minor
// faults per step here.
#include <catch2/catch.hpp>

#include <regex>

#include "test_skip.h"
#include "test_support.h"
#include "worker_test_util.h"

using namespace ddp::test;

namespace {

long faults_per_step(const std::string& output) {
  std::smatch m;
  const std::regex re("minor faults per step ([0-9]+)");
  REQUIRE(std::regex_search(output, m, re));
  return std::stol(m[1].str());
}

}  // namespace

TEST_CASE("malloc tuning: repeated training-step allocations fault no pages in a program on the runtime") {
#ifdef __SANITIZE_ADDRESS__
  DDP_SKIP("AddressSanitizer replaces malloc: mallopt has no effect");
#endif
  auto r = run({helper_path(), "alloc-faults", "steps=20"}, {{"OMP_NUM_THREADS", "1"}}, 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("malloc tuning applied"));
  // 26 MiB allocated per step = 6656 pages; a few stray faults are allowed.
  CHECK(faults_per_step(r.output) < 100);
}

TEST_CASE("malloc tuning: the user's own malloc settings win") {
  auto r = run({helper_path(), "alloc-faults", "steps=2"},
               {{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1000000000"}, {"OMP_NUM_THREADS", "1"}}, 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("malloc tuning skipped: malloc thresholds set by the environment"));
  auto off = run({helper_path(), "alloc-faults", "steps=2"}, {{"DDP_MALLOC_TUNING", "0"}, {"OMP_NUM_THREADS", "1"}}, 60);
  INFO(off.output);
  CHECK_THAT(off.output, Catch::Contains("malloc tuning skipped: DDP_MALLOC_TUNING=0"));
}
