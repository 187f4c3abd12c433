#pragma once
// How reports write a number with a fixed count of decimals. Pure; a leaf
// every layer may use.

#include <string>

namespace ddp::launcher {

// fixed_text(61.25, 1) == "61.2" (printf's "%.*f", round half to even).
std::string fixed_text(double v, int decimals);

}  // namespace ddp::launcher
