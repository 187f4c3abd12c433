#pragma once
// printf-style formatting of one number for the loop's messages and lines
// ("%.4f", "%g"), internal to the loop library.
#include <cstdio>
#include <string>

namespace ddp::loop {

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace ddp::loop
