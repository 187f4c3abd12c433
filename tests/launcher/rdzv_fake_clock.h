#pragma once
// The c10d rendezvous' time in the in-process tests (test_rendezvous.cpp,
// test_rdzv_scale.cpp): moved only by the test (or by a node's idle that
// lets time pass). Starts an hour in, so the first heartbeat is due at once
// as on the steady clock.
#include "rendezvous.h"

#include <atomic>
#include <chrono>

namespace ddp::rdzv::testing {

class FakeClock {
 public:
  Now now() {
    return [this] { return Clock::time_point(Clock::duration(ticks_.load())); };
  }
  void advance(std::chrono::milliseconds d) { ticks_ += std::chrono::duration_cast<Clock::duration>(d).count(); }

 private:
  std::atomic<Clock::rep> ticks_{std::chrono::duration_cast<Clock::duration>(std::chrono::hours(1)).count()};
};

}  // namespace ddp::rdzv::testing
