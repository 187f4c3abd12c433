#pragma once
// ddp-text's options: the shared training loop's (train_options.h, with
// ddp-text's defaults: --data_dir text-data, --checkpoint_dir
// text-checkpoints) plus the data preparation's and the model's. Parsed
// once; a bad value is a one-line UsageError.

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/text/prepare.h"
#include "ddp/loop/train_options.h"

namespace ddp::text {

struct TextOptions {
  ddp::loop::TrainOptions train;   // train.data_dir: the prepared directory
  std::string wordnet_dir = "/usr/share/wordnet";
  std::int64_t min_count = 2;       // vocabulary: training-split tokens seen this often
  int max_length = 64;              // tokens kept per text
  std::int64_t embedding_dim = 128;
  std::int64_t num_filters = 100;   // per filter width (3, 4, 5)
  double dropout = 0.5;
  std::string model = "textcnn";    // or textcnn_unused (a parameter forward never uses)
  bool prepare_only = false;

  PrepareOptions prepare() const { return {wordnet_dir, train.data_dir, min_count}; }
};

// args excludes argv[0]; `env` as parse_train_options.
TextOptions parse_text_options(const std::vector<std::string>& args, const ddp::loop::EnvLookup& env = {});
std::string text_usage();

}  // namespace ddp::text
