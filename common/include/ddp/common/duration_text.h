#pragma once
// How a message writes a duration: in seconds, always ("0.2 s", "5 s",
// "1800 s", "0.0004 s"), never milliseconds, so a sub-second or zero timeout
// reads like every other one. Pure; owns nothing.

#include <chrono>
#include <string>

namespace ddp {

// Up to millisecond precision with trailing zeros dropped ("1.5 s",
// "2147483.647 s"); below a millisecond three significant digits.
std::string seconds_text(double seconds);
std::string seconds_text(std::chrono::milliseconds d);

}  // namespace ddp
