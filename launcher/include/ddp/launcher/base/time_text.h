#pragma once
// How messages write a moment in time. Pure; a leaf every layer may use.

#include <chrono>
#include <string>

namespace ddp::launcher {

// "2026-11-29 17:50:01 UTC"
std::string format_time(std::chrono::system_clock::time_point t);

}  // namespace ddp::launcher
