// How messages write durations (duration_text.h): seconds, always.
#include <catch2/catch.hpp>

#include "ddp/common/duration_text.h"

TEST_CASE("durations in messages: seconds, millisecond precision, no trailing zeros") {
  CHECK(ddp::seconds_text(std::chrono::milliseconds(200)) == "0.2 s");
  CHECK(ddp::seconds_text(std::chrono::milliseconds(5000)) == "5 s");
  CHECK(ddp::seconds_text(std::chrono::milliseconds(0)) == "0 s");
  CHECK(ddp::seconds_text(std::chrono::milliseconds(1800000)) == "1800 s");
  CHECK(ddp::seconds_text(std::chrono::milliseconds(2147483647)) == "2147483.647 s");
  CHECK(ddp::seconds_text(1.5) == "1.5 s");
  CHECK(ddp::seconds_text(0.0004) == "0.0004 s");
  CHECK(ddp::seconds_text(-0.0) == "0 s");
}
