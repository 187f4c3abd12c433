#include "ddp/text/text_options.h"

namespace ddp::text {
namespace {

using ddp::loop::UsageError;

ddp::loop::TrainOptions text_defaults() {
  ddp::loop::TrainOptions d;
  d.program = "ddp-text";
  d.data_dir = "text-data";
  d.checkpoint_dir = "text-checkpoints";
  return d;
}

}  // namespace

ddp::loop::ProgramOptions text_program_options(TextOptions& t) {
  ddp::loop::ProgramOptions program;
  program.defaults = text_defaults();
  program.extra = {{"wordnet_dir", true}, {"min_count", true},   {"max_length", true}, {"embedding_dim", true},
                   {"num_filters", true}, {"dropout", true},     {"model", true},      {"prepare_only", false}};
  program.apply = [&t](const std::string& name, const std::string& value) {
    const std::string what = "--" + name;
    using ddp::loop::parse_int_option;
    if (name == "wordnet_dir") {
      if (value.empty()) throw UsageError(what + ": empty path");
      t.wordnet_dir = value;
    } else if (name == "min_count") t.min_count = parse_int_option(value, what, 1, 1LL << 40);
    else if (name == "max_length") t.max_length = static_cast<int>(parse_int_option(value, what, 1, 1 << 20));
    else if (name == "embedding_dim") t.embedding_dim = parse_int_option(value, what, 1, 1 << 16);
    else if (name == "num_filters") t.num_filters = parse_int_option(value, what, 1, 1 << 16);
    else if (name == "dropout") t.dropout = ddp::loop::parse_fraction_option(value, what);
    else if (name == "model") {
      if (value != "textcnn" && value != "textcnn_unused")
        throw UsageError(what + ": '" + value + "' is not a model, use textcnn or textcnn_unused");
      t.model = value;
    } else if (name == "prepare_only") t.prepare_only = true;
  };
  return program;
}

std::map<std::string, std::string> TextOptions::identity() const {
  return {{"min_count", std::to_string(min_count)},
          {"max_length", std::to_string(max_length)},
          {"embedding_dim", std::to_string(embedding_dim)},
          {"num_filters", std::to_string(num_filters)},
          {"dropout", std::to_string(dropout)},
          {"model", model}};
}

std::string text_usage() {
  return R"(usage: ddp-launch --nproc_per_node=N ddp-text [options]

Trains a text CNN (Kim 2014) to tell a WordNet synset's supersense (45
lexicographer files: noun.animal, verb.motion, ...) from its gloss, with
distributed data parallelism, the seeds' loop: DistributedSampler with
set_epoch and drop_last, DDP with find_unused_parameters, Adam,
ReduceLROnPlateau on macro-F1, rank-0 checkpoint per epoch, best macro- and
micro-F1 at the end. Rank 0 first prepares the data (once; reused while
WordNet and --min_count stay the same).

data and model:
  --wordnet_dir DIR     WordNet's data.noun/verb/adj/adv (default /usr/share/wordnet,
                        Debian's wordnet-base)
  --data_dir DIR        the prepared train.csv, test.csv, vocab.txt, labels.txt,
                        prepared.json (default text-data)
  --prepare_only        prepare --data_dir and exit
  --min_count N         vocabulary: training tokens seen at least N times (default 2)
  --max_length N        tokens kept per text (default 64)
  --embedding_dim N     (default 128)
  --num_filters N       feature maps per filter width 3, 4, 5 (default 100)
  --dropout X           before the classifier, 0 <= X < 1 (default 0.5)
  --model M             textcnn, or textcnn_unused: the same with a parameter that
                        forward never uses (tests DDP's find_unused_parameters)
training:
)" + ddp::loop::loop_options_usage(text_defaults());
}

}  // namespace ddp::text
