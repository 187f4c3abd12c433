#pragma once
// A c10d::Store value from text (Store::set and get take and give bytes).

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::test {

inline std::vector<uint8_t> store_bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace ddp::test
