#include "cpu_capability.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace ddp::test {

std::optional<std::string> forced_capability_unsupported() {
  const char* forced = std::getenv("ATEN_CPU_CAPABILITY");
  if (!forced || !*forced) return std::nullopt;
  const std::string cap = forced;
  std::set<std::string> flags;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  // What ATen 2.x's own check (cpuinfo) asks of each capability.
  std::set<std::string> needed;
  if (cap == "avx2") needed = {"avx2", "fma"};
  else if (cap == "avx512") needed = {"avx512f", "avx512bw", "avx512vl", "avx512dq"};
  else if (cap != "default") return "unknown ATEN_CPU_CAPABILITY '" + cap + "'";
  for (const auto& f : needed)
    if (!flags.count(f)) return "this CPU lacks " + f + " for ATEN_CPU_CAPABILITY=" + cap;
  return std::nullopt;
}

}  // namespace ddp::test
