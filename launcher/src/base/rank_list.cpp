#include "ddp/launcher/base/rank_list.h"

#include <algorithm>

namespace ddp::launcher {

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j - i >= 2) {
      out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      out += (out.empty() ? "" : ",") + std::to_string(ranks[i]);
      ++i;
    }
  }
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

}  // namespace ddp::launcher
