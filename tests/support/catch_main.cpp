// Catch2's main for every test binary, with one addition: a test case that
// calls DDP_SKIP (test_skip.h) makes the process exit with kSkipReturnCode
// when nothing failed, so CTest (SKIP_RETURN_CODE, one case per process)
// reports it as skipped instead of passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "test_skip.h"

int main(int argc, char* argv[]) {
  const int failed = Catch::Session().run(argc, argv);
  // Catch returns the number of failed cases; any of them must not be read
  // as the skip code by accident.
  if (failed != 0) return 1;
  return ddp::test::skipped() ? ddp::test::kSkipReturnCode : 0;
}
