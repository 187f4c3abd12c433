// rank0_decides with real processes: every rank gets rank 0's decision
// (binary-safe, twice in a row), and when rank 0's decision throws every rank
// fails with rank 0's message instead of waiting for it.
#include <catch2/catch.hpp>

#include "test_support.h"
#include "worker_test_util.h"

using namespace ddp::test;

TEST_CASE("rank0_decides: every rank gets rank 0's decision") {
  auto ranks = run_ranks(3, {"rank0-decides", "fail=0"});
  for (int r = 0; r < 3; ++r) {
    INFO(ranks[r].output);
    CHECK(ranks[r].exit_code == 0);
    const std::string me = "rank " + std::to_string(r);
    CHECK_THAT(ranks[r].output, Catch::Contains(me + " got 'decision 1' length 16"));
    CHECK_THAT(ranks[r].output, Catch::Contains(me + " got 'decision 2' length 16"));
    CHECK_THAT(ranks[r].output, Catch::Contains(me + " int -42"));
  }
}

TEST_CASE("rank0_decides: when rank 0 throws, every rank fails with its message and none hangs") {
  auto ranks = run_ranks(2, {"rank0-decides", "fail=1"}, {}, /*timeout_s=*/60);
  for (int r = 0; r < 2; ++r) {
    INFO(ranks[r].output);
    CHECK(ranks[r].exit_code == 1);  // not -1 (timed out)
    // Rank 0's own error; the others follow it (PeerFailure: their error
    // files say so, and the launcher's report names rank 0).
    CHECK_THAT(ranks[r].output, Catch::Contains("[rank " + std::to_string(r) + "] error: " +
                                                (r == 0 ? "std::runtime_error" : "ddp::worker::PeerFailure") +
                                                ": rank 0 cannot decide round 1"));
    CHECK_THAT(ranks[r].output, !Catch::Contains("got"));
  }
}
