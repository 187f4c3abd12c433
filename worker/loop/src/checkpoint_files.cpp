#include "ddp/loop/checkpoint_files.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <utility>

namespace ddp::loop {
namespace fs = std::filesystem;

std::string epoch_checkpoint_path(const std::string& dir, int epoch) {
  return (fs::path(dir) / ("epoch_" + std::to_string(epoch) + ".pt")).string();
}

std::string step_checkpoint_path(const std::string& dir, int epoch, std::int64_t step) {
  return (fs::path(dir) / ("epoch_" + std::to_string(epoch) + "_step_" + std::to_string(step) + ".pt")).string();
}

std::string metrics_path(const std::string& dir) { return (fs::path(dir) / "metrics.jsonl").string(); }

std::vector<FoundCheckpoint> list_checkpoints(const std::string& dir) {
  static const std::regex name_re("epoch_([0-9]{1,9})(_step_([0-9]{1,12}))?\\.pt");
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
    const std::int64_t step = m[3].matched ? std::stoll(m[3].str()) : 0;
    if (epoch > 0 && (step > 0 || !m[3].matched)) found.push_back(FoundCheckpoint{epoch, it->path().string(), step});
  }
  // Newest first: epoch_2.pt (2 epochs done) is older than
  // epoch_3_step_4.pt (2 done, 4 steps into the third).
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.epochs_done(), a.step) > std::make_pair(b.epochs_done(), b.step);
  });
  return found;
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  // ddp-train-write-test: the probe's name before the loop was a library of
  // its own; names without the hex part: older atomic writes'.
  static const std::regex temp_re(
      "\\.(epoch_[0-9]{1,9}(_step_[0-9]{1,12})?\\.pt|metrics\\.jsonl|ddp-(loop|train)-write-test)\\.tmp\\.[0-9]+(\\.[0-9a-f]{16})?|"
      "ddp-(loop|train)-write-test");
  std::vector<std::string> removed;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return removed;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, temp_re) || !it->is_regular_file(ec)) continue;
    std::error_code rm;
    if (fs::remove(it->path(), rm)) removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::string describe_earlier_run(const std::string& dir) {
  std::string what;
  const auto ckpts = list_checkpoints(dir);
  if (!ckpts.empty())
    what = ckpts.size() == 1 ? fs::path(ckpts.front().path).filename().string()
                             : std::to_string(ckpts.size()) + " checkpoints (" +
                                   fs::path(ckpts.back().path).filename().string() + " .. " +
                                   fs::path(ckpts.front().path).filename().string() + ")";
  std::error_code ec;
  if (fs::file_size(metrics_path(dir), ec) > 0 && !ec) what += (what.empty() ? "" : " and ") + std::string("metrics.jsonl");
  return what;
}

std::vector<std::string> remove_step_checkpoints(const std::string& dir, const std::string& keep) {
  std::vector<std::string> removed;
  for (const auto& found : list_checkpoints(dir)) {
    const std::string name = fs::path(found.path).filename().string();
    if (found.step == 0 || name == keep) continue;
    std::error_code ec;
    if (fs::remove(found.path, ec)) removed.push_back(name);
  }
  return removed;
}

std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.front();
}

}  // namespace ddp::loop
