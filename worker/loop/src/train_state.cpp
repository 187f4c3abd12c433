#include "ddp/loop/train_state.h"

#include <filesystem>
#include <stdexcept>

#include "ddp/worker/checkpoint.h"

namespace ddp::loop {
namespace {

// Checkpoint keys of a metric's best epoch. macro_f1 and micro_f1 keep the
// keys they always had, so older checkpoints and their Python readers stay
// right.
struct BestKeys {
  std::string value, epoch, checkpoint;
};
BestKeys best_keys(const std::string& metric) {
  if (metric == "macro_f1" || metric == "micro_f1") {
    const std::string which = metric.substr(0, 5);  // "macro" / "micro"
    return {"train.best_" + metric, "train.best_" + which + "_epoch", "train.best_" + which + "_checkpoint"};
  }
  return {"train.best." + metric, "train.best." + metric + ".epoch", "train.best." + metric + ".checkpoint"};
}

// The metric whose value key this is, or "".
std::string metric_of_value_key(const std::string& key) {
  if (key == "train.best_macro_f1") return "macro_f1";
  if (key == "train.best_micro_f1") return "micro_f1";
  const std::string prefix = "train.best.";
  if (key.compare(0, prefix.size(), prefix) != 0) return "";
  const std::string rest = key.substr(prefix.size());
  if (rest.size() > 6 && rest.compare(rest.size() - 6, 6, ".epoch") == 0) return "";
  return rest;
}

}  // namespace

void store_train_state(const TrainState& s, ddp::worker::Checkpoint& c) {
  c.epoch = s.epochs_done;
  c.step = s.global_step;
  auto& m = c.metrics;
  m["train.learning_rate"] = s.learning_rate;
  m["train.plateau.best"] = s.plateau.best;
  m["train.plateau.num_bad_epochs"] = s.plateau.num_bad_epochs;
  m["train.plateau.cooldown_counter"] = s.plateau.cooldown_counter;
  m["train.plateau.last_epoch"] = s.plateau.last_epoch;
  for (const auto& [metric, best] : s.best) {
    const BestKeys k = best_keys(metric);
    m[k.value] = best.value;
    m[k.epoch] = best.epoch;
    c.strings[k.checkpoint] = best.checkpoint;
  }
  m["train.world_size"] = s.world_size;
  m["train.batch_size"] = s.batch_size;
  c.strings["train.run"] = s.run_identity;
  c.strings["train.launches"] = s.launches;
  c.strings["train.metrics_line"] = s.metrics_line;
}

TrainState load_train_state(const ddp::worker::Checkpoint& c, const std::string& path) {
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
    const std::string metric = metric_of_value_key(key);
    if (metric.empty()) continue;
    const BestKeys k = best_keys(metric);
    s.best[metric] = {value, static_cast<int>(num(k.epoch.c_str())), name(k.checkpoint.c_str())};
  }
  s.world_size = static_cast<int>(num("train.world_size"));
  s.batch_size = static_cast<int>(num("train.batch_size"));
  s.run_identity = str("train.run");
  s.launches = str("train.launches");
  s.metrics_line = str("train.metrics_line");
  return s;
}

}  // namespace ddp::loop
