#pragma once
// Skipping a test case that cannot run here (no reference Python, no data set,
// no binary): DDP_SKIP("why") prints the reason and returns from the case; the
// test binary then exits with kSkipReturnCode (see catch_main.cpp), which the
// CMake files register as CTest's SKIP_RETURN_CODE. Never counted as passed.

#include <catch2/catch.hpp>

#include <string>

namespace ddp::test {

constexpr int kSkipReturnCode = 77;  // automake's "skipped"

// Records that the running case was skipped (read by catch_main.cpp).
void mark_skipped(const std::string& why);
bool skipped();

}  // namespace ddp::test

#define DDP_SKIP(why)                                                \
  do {                                                               \
    ::ddp::test::mark_skipped(why);                                  \
    WARN("skipped: " << (why));                                      \
    return;                                                          \
  } while (false)
