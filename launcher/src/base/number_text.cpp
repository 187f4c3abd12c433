#include "ddp/launcher/base/number_text.h"

#include <cstdio>

namespace ddp::launcher {

std::string fixed_text(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace ddp::launcher
