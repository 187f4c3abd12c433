#include "ddp/train/checkpoint_files.h"

#include <algorithm>
#include <filesystem>
#include <regex>

namespace ddp::train {
namespace fs = std::filesystem;

std::string epoch_checkpoint_path(const std::string& dir, int epoch) {
  return (fs::path(dir) / ("epoch_" + std::to_string(epoch) + ".pt")).string();
}

std::string metrics_path(const std::string& dir) { return (fs::path(dir) / "metrics.jsonl").string(); }

std::vector<FoundCheckpoint> list_checkpoints(const std::string& dir) {
  static const std::regex name_re("epoch_([0-9]{1,9})\\.pt");
  std::vector<FoundCheckpoint> found;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return found;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, name_re) || !it->is_regular_file(ec)) continue;
    const int epoch = std::stoi(m[1].str());
    if (epoch > 0) found.push_back(FoundCheckpoint{epoch, it->path().string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.epoch > b.epoch; });
  return found;
}

std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.front();
}

}  // namespace ddp::train
