// The one way launcher messages write a set of ranks (rank_list.h), shared by
// the stall verdict and the stack summary.
#include "ddp/launcher/base/rank_list.h"

#include <catch2/catch.hpp>

using namespace ddp::launcher;

TEST_CASE("rank lists: sorted, runs of three or more as a-b, pairs as two ranks") {
  CHECK(ranks_text({1}) == "rank 1");
  CHECK(ranks_text({0, 1}) == "ranks 0,1");
  CHECK(ranks_text({3, 0, 2}) == "ranks 0,2,3");
  CHECK(ranks_text({0, 1, 2, 3, 4, 5, 6, 7}) == "ranks 0-7");
  CHECK(ranks_text({7, 6, 4, 3, 2, 1, 0}) == "ranks 0-4,6,7");
  CHECK(ranks_text({0, 3, 4, 5, 6, 7, 9}) == "ranks 0,3-7,9");
  CHECK(rank_list({}) == "");
  CHECK(rank_list({12, 10, 11, 20}) == "10-12,20");
}
