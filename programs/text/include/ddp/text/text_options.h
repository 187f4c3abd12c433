#pragma once
// ddp-text's options: the shared training loop's (train_options.h, with
// ddp-text's defaults: --data_dir text-data, --checkpoint_dir
// text-checkpoints) plus the data preparation's and the model's, parsed
// once by run_program (program_setup.h); a bad value is a one-line
// UsageError.

#include <cstdint>
#include <map>
#include <string>

#include "ddp/text/prepare.h"
#include "ddp/loop/train_options.h"

namespace ddp::text {

// ddp-text's own options; the loop's --data_dir is the prepared directory.
struct TextOptions {
  std::string wordnet_dir = "/usr/share/wordnet";
  std::int64_t min_count = 2;       // vocabulary: training-split tokens seen this often
  int max_length = 64;              // tokens kept per text
  std::int64_t embedding_dim = 128;
  std::int64_t num_filters = 100;   // per filter width (3, 4, 5)
  double dropout = 0.5;
  std::string model = "textcnn";    // or textcnn_unused (a parameter forward never uses)
  bool prepare_only = false;

  PrepareOptions prepare(const std::string& data_dir) const { return {wordnet_dir, data_dir, min_count}; }
  // What decides the trajectory besides the loop's options (run_identity.h).
  std::map<std::string, std::string> identity() const;
};

// ddp-text's defaults and its own options, each parsed into `into` (which
// must outlive the parse).
ddp::loop::ProgramOptions text_program_options(TextOptions& into);
std::string text_usage();

}  // namespace ddp::text
