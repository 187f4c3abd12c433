#include "test_skip.h"

#include <cstdio>

namespace ddp::test {
namespace {
bool g_skipped = false;
}

void mark_skipped(const std::string& why) {
  g_skipped = true;
  std::fprintf(stderr, "SKIPPED: %s\n", why.c_str());
}

bool skipped() { return g_skipped; }

}  // namespace ddp::test
