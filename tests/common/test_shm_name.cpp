// The shared-memory segment name the worker makes and the launcher parses (shm_name.h).
#include <catch2/catch.hpp>

#include "ddp/common/shm_name.h"

TEST_CASE("shm segment name: the worker's name parses back to its pid on the launcher's side") {
  CHECK(ddp::shm_segment_name(4242, 17) == "/ddp-shm-4242-17");
  CHECK(ddp::shm_segment_name_head("4242") == "/ddp-shm-4242-");
  CHECK(ddp::shm_segment_pid(ddp::shm_segment_name(4242, 17)) == 4242);
  CHECK(ddp::shm_segment_pid("ddp-shm-4242-17") == 4242);  // a /dev/shm entry
  CHECK(ddp::shm_segment_pid("ddp-shm-7-test") == 7);      // whatever follows the pid
}

TEST_CASE("shm segment name: names of another form have no pid") {
  CHECK(ddp::shm_segment_pid("") == 0);
  CHECK(ddp::shm_segment_pid("ddp-shm-") == 0);
  CHECK(ddp::shm_segment_pid("ddp-shm-4242") == 0);     // no '-' after the pid
  CHECK(ddp::shm_segment_pid("ddp-shm-x-17") == 0);
  CHECK(ddp::shm_segment_pid("ddp-shm-0-17") == 0);
  CHECK(ddp::shm_segment_pid("ddp-shm--5-17") == 0);
  CHECK(ddp::shm_segment_pid("other-ddp-shm-4242-17") == 0);
  CHECK(ddp::shm_segment_pid("sem.ddp-shm-4242-17") == 0);
}
