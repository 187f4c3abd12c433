#include "ddp/common/duration_text.h"

#include <cmath>
#include <cstdio>

namespace ddp {

std::string seconds_text(double seconds) {
  char buf[64];
  if (seconds != 0 && std::fabs(seconds) < 0.001) {
    std::snprintf(buf, sizeof(buf), "%.3g", seconds);
    return std::string(buf) + " s";
  }
  std::snprintf(buf, sizeof(buf), "%.3f", seconds);
  std::string t = buf;
  while (!t.empty() && t.back() == '0') t.pop_back();
  if (!t.empty() && t.back() == '.') t.pop_back();
  if (t == "-0") t = "0";
  return t + " s";
}

std::string seconds_text(std::chrono::milliseconds d) { return seconds_text(static_cast<double>(d.count()) / 1000.0); }

}  // namespace ddp
