#include "ddp/train/train_state.h"

#include <filesystem>
#include <stdexcept>

#include "ddp/worker/checkpoint.h"

namespace ddp::train {

void store_train_state(const TrainState& s, ddp::worker::Checkpoint& c) {
  c.epoch = s.epochs_done;
  c.step = s.global_step;
  auto& m = c.metrics;
  m["train.learning_rate"] = s.learning_rate;
  m["train.plateau.best"] = s.plateau.best;
  m["train.plateau.num_bad_epochs"] = s.plateau.num_bad_epochs;
  m["train.plateau.cooldown_counter"] = s.plateau.cooldown_counter;
  m["train.plateau.last_epoch"] = s.plateau.last_epoch;
  m["train.best_macro_f1"] = s.best_macro.value;
  m["train.best_macro_epoch"] = s.best_macro.epoch;
  m["train.best_micro_f1"] = s.best_micro.value;
  m["train.best_micro_epoch"] = s.best_micro.epoch;
  m["train.world_size"] = s.world_size;
  m["train.batch_size"] = s.batch_size;
  c.strings["train.best_macro_checkpoint"] = s.best_macro.checkpoint;
  c.strings["train.best_micro_checkpoint"] = s.best_micro.checkpoint;
  c.strings["train.run"] = s.run_identity;
  c.strings["train.launches"] = s.launches;
  c.strings["train.metrics_line"] = s.metrics_line;
}

TrainState load_train_state(const ddp::worker::Checkpoint& c, const std::string& path) {
  auto num = [&](const char* key) {
    auto it = c.metrics.find(key);
    if (it == c.metrics.end())
      throw std::runtime_error("checkpoint '" + path + "' has no '" + key +
                               "': it was not written by ddp-train; move it away or use another --checkpoint_dir");
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
  s.best_macro = {num("train.best_macro_f1"), static_cast<int>(num("train.best_macro_epoch")),
                  name("train.best_macro_checkpoint")};
  s.best_micro = {num("train.best_micro_f1"), static_cast<int>(num("train.best_micro_epoch")),
                  name("train.best_micro_checkpoint")};
  s.world_size = static_cast<int>(num("train.world_size"));
  s.batch_size = static_cast<int>(num("train.batch_size"));
  s.run_identity = str("train.run");
  s.launches = str("train.launches");
  s.metrics_line = str("train.metrics_line");
  return s;
}

}  // namespace ddp::train
