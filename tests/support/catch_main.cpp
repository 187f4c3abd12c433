// Catch2's main for every test binary, with one addition: a test case that
// calls DDP_SKIP (test_skip.h) makes the process exit with kSkipReturnCode
// when nothing failed, so CTest (SKIP_RETURN_CODE, one case per process)
// reports it as skipped instead of passed. A binary run under a forced CPU
// capability this CPU lacks (cpu_capability.h) is skipped whole, before any
// case: every case would run LibTorch's kernels for that capability.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "cpu_capability.h"
#include "test_skip.h"

#include <cstdio>

int main(int argc, char* argv[]) {
  if (auto why = ddp::test::forced_capability_unsupported()) {
    std::printf("SKIPPED: %s: no case is run\n", why->c_str());
    return ddp::test::kSkipReturnCode;
  }
  const int failed = Catch::Session().run(argc, argv);
  // Catch returns the number of failed cases; any of them must not be read
  // as the skip code by accident.
  if (failed != 0) return 1;
  return ddp::test::skipped() ? ddp::test::kSkipReturnCode : 0;
}
