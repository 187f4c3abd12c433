#include "ddp/train/checkpoint_files.h"

#include <filesystem>
#include <regex>

namespace ddp::train {
namespace fs = std::filesystem;

std::string epoch_checkpoint_path(const std::string& dir, int epoch) {
  return (fs::path(dir) / ("epoch_" + std::to_string(epoch) + ".pt")).string();
}

std::string metrics_path(const std::string& dir) { return (fs::path(dir) / "metrics.jsonl").string(); }

std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& dir) {
  static const std::regex name_re("epoch_([0-9]{1,9})\\.pt");
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return std::nullopt;
  std::optional<FoundCheckpoint> best;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, name_re) || !it->is_regular_file(ec)) continue;
    const int epoch = std::stoi(m[1].str());
    if (epoch > 0 && (!best || epoch > best->epoch)) best = FoundCheckpoint{epoch, it->path().string()};
  }
  return best;
}

}  // namespace ddp::train
