#include "ddp/loop/train_state.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <utility>

#include <ATen/ATen.h>
#include <stdexcept>

#include "ddp/worker/checkpoint.h"

namespace ddp::loop {
namespace {

// The metric whose value key this is under `legacy` or the default keys, or "".
std::string metric_of_value_key(const std::string& key, const LegacyBestKeys& legacy) {
  for (const auto& [metric, k] : legacy)
    if (k.value == key) return metric;
  const std::string prefix = "train.best.";
  if (key.compare(0, prefix.size(), prefix) != 0) return "";
  const std::string rest = key.substr(prefix.size());
  if (rest.size() > 6 && rest.compare(rest.size() - 6, 6, ".epoch") == 0) return "";
  return rest;
}

std::string rng_key(const char* which, std::size_t rank) {
  return std::string("train.rng.") + which + ".rank_" + std::to_string(rank);
}

at::Tensor bytes_tensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU).to(at::kByte).contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel()));
}

const std::string kTask = "task.";

}  // namespace

BestKeys best_keys_of(const std::string& metric, const LegacyBestKeys& legacy) {
  if (const auto it = legacy.find(metric); it != legacy.end()) return it->second;
  return {"train.best." + metric, "train.best." + metric + ".epoch", "train.best." + metric + ".checkpoint"};
}

void store_train_state(const TrainState& s, ddp::worker::Checkpoint& c, const LegacyBestKeys& legacy) {
  c.epoch = s.epochs_done;
  c.step = s.global_step;
  auto& m = c.metrics;
  m["train.learning_rate"] = s.learning_rate;
  m["train.plateau.best"] = s.plateau.best;
  m["train.plateau.num_bad_epochs"] = s.plateau.num_bad_epochs;
  m["train.plateau.cooldown_counter"] = s.plateau.cooldown_counter;
  m["train.plateau.last_epoch"] = s.plateau.last_epoch;
  for (const auto& [metric, best] : s.best) {
    const BestKeys k = best_keys_of(metric, legacy);
    m[k.value] = best.value;
    m[k.epoch] = best.epoch;
    c.strings[k.checkpoint] = best.checkpoint;
  }
  m["train.world_size"] = s.world_size;
  m["train.batch_size"] = s.batch_size;
  // Only when in use: a default run's checkpoint keeps the keys it always had.
  if (s.accumulate_batches > 1) m["train.accumulate_batches"] = s.accumulate_batches;
  if (!s.schedule_name.empty()) c.strings["train.schedule"] = s.schedule_name;
  for (const auto& [k, v] : s.schedule) m["train.schedule." + k] = v;
  for (const auto& [k, v] : s.task.numbers) m[kTask + k] = v;
  for (const auto& [k, v] : s.task.strings) c.strings[kTask + k] = v;
  for (const auto& [k, v] : s.task.bytes) c.tensors[kTask + k] = bytes_tensor(v);
  c.strings["train.run"] = s.run_identity;
  c.strings["train.launches"] = s.launches;
  c.strings["train.metrics_line"] = s.metrics_line;
  // Only mid-epoch: an epoch checkpoint keeps the keys it always had.
  if (s.epoch_steps_done > 0) {
    m["train.epoch_steps_done"] = static_cast<double>(s.epoch_steps_done);
    m["train.epoch_loss_sum"] = s.epoch_loss_sum;
    m["train.epoch_samples"] = static_cast<double>(s.epoch_samples);
    m["train.epoch_seconds"] = s.epoch_seconds;
  }
  for (std::size_t r = 0; r < s.cpu_rng.size(); ++r) c.tensors[rng_key("cpu", r)] = bytes_tensor(s.cpu_rng[r]);
  for (std::size_t r = 0; r < s.device_rng.size(); ++r) c.tensors[rng_key("device", r)] = bytes_tensor(s.device_rng[r]);
}

TrainState load_train_state(const ddp::worker::Checkpoint& c, const std::string& path, const LegacyBestKeys& legacy) {
  auto num = [&](const char* key) {
    auto it = c.metrics.find(key);
    if (it == c.metrics.end())
      throw std::runtime_error("checkpoint '" + path + "' has no '" + key +
                               "': it was not written by this training loop; move it away or use another --checkpoint_dir");
    return it->second;
  };
  auto str = [&](const char* key) {
    auto it = c.strings.find(key);
    return it == c.strings.end() ? std::string() : it->second;
  };
  TrainState s;
  s.epochs_done = static_cast<int>(c.epoch);
  s.global_step = c.step;
  s.learning_rate = num("train.learning_rate");
  s.plateau.best = num("train.plateau.best");
  s.plateau.num_bad_epochs = static_cast<int>(num("train.plateau.num_bad_epochs"));
  s.plateau.cooldown_counter = static_cast<int>(num("train.plateau.cooldown_counter"));
  s.plateau.last_epoch = static_cast<int>(num("train.plateau.last_epoch"));
  // Older checkpoints stored "<dir as given>/epoch_N.pt": its name is what
  // stays true after the directory moved.
  auto name = [&](const char* key) { return std::filesystem::path(str(key)).filename().string(); };
  for (const auto& [key, value] : c.metrics) {
    const std::string metric = metric_of_value_key(key, legacy);
    if (metric.empty()) continue;
    const BestKeys k = best_keys_of(metric, legacy);
    s.best[metric] = {value, static_cast<int>(num(k.epoch.c_str())), name(k.checkpoint.c_str())};
  }
  s.world_size = static_cast<int>(num("train.world_size"));
  s.batch_size = static_cast<int>(num("train.batch_size"));
  s.run_identity = str("train.run");
  s.launches = str("train.launches");
  s.metrics_line = str("train.metrics_line");
  auto optional_num = [&](const char* key) {
    auto it = c.metrics.find(key);
    return it == c.metrics.end() ? 0.0 : it->second;
  };
  s.epoch_steps_done = static_cast<std::int64_t>(optional_num("train.epoch_steps_done"));
  s.epoch_loss_sum = optional_num("train.epoch_loss_sum");
  s.epoch_samples = static_cast<std::int64_t>(optional_num("train.epoch_samples"));
  s.epoch_seconds = optional_num("train.epoch_seconds");
  s.accumulate_batches = std::max(1, static_cast<int>(optional_num("train.accumulate_batches")));
  s.schedule_name = str("train.schedule");
  // By prefix: the maps are sorted, so each prefix's keys are one run.
  const auto with_prefix = [](const auto& map, const std::string& prefix, auto&& take) {
    for (auto it = map.lower_bound(prefix); it != map.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      take(it->first.substr(prefix.size()), it->second);
  };
  with_prefix(c.metrics, "train.schedule.", [&](const std::string& k, double v) { s.schedule[k] = v; });
  with_prefix(c.metrics, kTask, [&](const std::string& k, double v) { s.task.numbers[k] = v; });
  with_prefix(c.strings, kTask, [&](const std::string& k, const std::string& v) { s.task.strings[k] = v; });
  with_prefix(c.tensors, kTask, [&](const std::string& k, const at::Tensor& v) { s.task.bytes[k] = tensor_bytes(v); });
  for (const auto& [which, into] : {std::pair{"cpu", &s.cpu_rng}, std::pair{"device", &s.device_rng}})
    for (std::size_t r = 0;; ++r) {
      auto it = c.tensors.find(rng_key(which, r));
      if (it == c.tensors.end()) break;
      into->push_back(tensor_bytes(it->second));
    }
  return s;
}

}  // namespace ddp::loop
