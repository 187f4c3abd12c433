// char-lm: a small causal Transformer that learns to write WordNet glosses
// one character at a time, the fourth program on the loop library and the
// language model a C++ LibTorch user writes today. Its data (the glosses of
// Debian's wordnet-base, the ones ddp-text classifies), its model (GPT-style
// pre-norm blocks) and what differs from the loop's classifier defaults:
// a token-level cross-entropy, perplexity as the evaluation, "lower is
// better", AdamW, the vocabulary in every checkpoint and a per-step log
// (steps.jsonl: loss, learning rate, gradient norm). The loop brings the
// rest, from options only: warm-up + cosine (--lr_schedule cosine
// --warmup_steps), clipping (--grad_clip_norm), accumulation
// (--accumulate_batches), evaluation by steps (--eval_every_steps) and
// --total_steps, besides DDP, checkpoints and resume.
//   ddp-launch --standalone --nproc_per_node=2 ./char-lm --total_steps 2000 --eval_every_steps 200
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "ddp/loop/callbacks.h"
#include "ddp/loop/program_setup.h"
#include "ddp/loop/train_options.h"
#include "ddp/loop/training_task.h"
#include "ddp/worker/run_main.h"

namespace {

namespace nn = torch::nn;
using ddp::loop::LossReduction;
using ddp::loop::Metrics;
using ddp::loop::Monitor;
using ddp::loop::TaskOutput;
using ddp::loop::TaskState;
using ddp::loop::UsageError;

struct LmOptions {
  std::string wordnet_dir = "/usr/share/wordnet";
  std::int64_t context = 64;  // characters a sequence; the model sees at most this many
  std::int64_t d_model = 64;
  std::int64_t heads = 4;
  std::int64_t layers = 2;
  double dropout = 0.0;
  std::int64_t test_sequences = 1024;  // 0 = every held-out sequence
};

// ---- data: WordNet's glosses as one character stream ----------------------

// Every gloss of data.noun/verb/adj/adv (wndb(5WN): the text after a line's
// first '|'; lines opening with two spaces are the license), one a line.
// Each 20th gloss is held out for evaluation.
struct Corpus {
  std::string alphabet;     // the distinct bytes of all glosses, sorted: token i is alphabet[i]
  torch::Tensor train, test;  // long token streams
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::runtime_error(path + " not found or unreadable; install Debian's wordnet-base "
                             "(apt-get install wordnet-base) or pass --wordnet_dir DIR");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Corpus read_corpus(const std::string& dir) {
  std::string train, test;
  std::int64_t glosses = 0;
  for (const char* name : {"data.noun", "data.verb", "data.adj", "data.adv"}) {
    const std::string path = dir + "/" + name;
    const std::string text = read_file(path);
    std::istringstream lines(text);
    std::string line;
    for (std::int64_t no = 1; std::getline(lines, line); ++no) {
      if (line.rfind("  ", 0) == 0) continue;
      const auto bar = line.find('|');
      if (bar == std::string::npos)
        throw std::runtime_error(path + ":" + std::to_string(no) + ": no '|' before a gloss; the file is damaged: "
                                 "reinstall wordnet-base or pass another --wordnet_dir");
      const auto begin = line.find_first_not_of(" \t\r", bar + 1);
      const auto end = line.find_last_not_of(" \t\r");
      if (begin == std::string::npos) continue;
      (glosses++ % 20 == 0 ? test : train) += line.substr(begin, end + 1 - begin) + "\n";
    }
  }
  if (train.size() < 1000 || test.empty())
    throw std::runtime_error(dir + " holds only " + std::to_string(glosses) +
                             " glosses; pass the --wordnet_dir of a whole WordNet (data.noun, ...)");
  Corpus c;
  bool seen[256] = {};
  for (const std::string* s : {&train, &test})
    for (const unsigned char ch : *s) seen[ch] = true;
  std::int64_t id[256];
  for (int b = 0; b < 256; ++b)
    if (seen[b]) {
      id[b] = static_cast<std::int64_t>(c.alphabet.size());
      c.alphabet += static_cast<char>(b);
    }
  const auto encode = [&](const std::string& s) {
    auto t = torch::empty({static_cast<std::int64_t>(s.size())}, torch::kLong);
    auto* p = t.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < s.size(); ++i) p[i] = id[static_cast<unsigned char>(s[i])];
    return t;
  };
  c.train = encode(train);
  c.test = encode(test);
  return c;
}

// ---- model: GPT-style pre-norm decoder blocks ------------------------------

// Causal self-attention written out (one projection to q, k, v; masked
// softmax), so the Python twin (bench/lm/python_lm.py) runs the same
// operations on every LibTorch version, 1.13 included.
struct BlockImpl : nn::Module {
  BlockImpl(std::int64_t d, std::int64_t heads, double dropout)
      : heads(heads),
        ln1(register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({d})))),
        qkv(register_module("qkv", nn::Linear(d, 3 * d))),
        proj(register_module("proj", nn::Linear(d, d))),
        ln2(register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({d})))),
        fc(register_module("fc", nn::Linear(d, 4 * d))),
        out(register_module("out", nn::Linear(4 * d, d))),
        drop(register_module("drop", nn::Dropout(dropout))) {}

  // x [B, T, d]; mask [T, T], true above the diagonal (the future).
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    const auto B = x.size(0), T = x.size(1), d = x.size(2), dh = d / heads;
    const auto qkv_ = qkv(ln1(x)).view({B, T, 3, heads, dh}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, dh]
    const auto q = qkv_[0], k = qkv_[1], v = qkv_[2];
    auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
    att = drop(torch::softmax(att.masked_fill(mask, -std::numeric_limits<float>::infinity()), -1));
    const auto y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, d});
    x = x + drop(proj(y));
    return x + drop(out(torch::gelu(fc(ln2(x)))));
  }

  std::int64_t heads;
  nn::LayerNorm ln1;
  nn::Linear qkv, proj;
  nn::LayerNorm ln2;
  nn::Linear fc, out;
  nn::Dropout drop;
};
TORCH_MODULE(Block);

struct CharTransformerImpl : nn::Module {
  CharTransformerImpl(std::int64_t vocab, const LmOptions& o)
      : tok(register_module("tok", nn::Embedding(vocab, o.d_model))),
        pos(register_module("pos", nn::Embedding(o.context, o.d_model))),
        blocks(register_module("blocks", nn::ModuleList())),
        ln_f(register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({o.d_model})))),
        head(register_module("head", nn::Linear(o.d_model, vocab))) {
    for (std::int64_t i = 0; i < o.layers; ++i) blocks->push_back(Block(o.d_model, o.heads, o.dropout));
  }

  // idx [B, T] token ids -> logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor& idx) {
    const auto T = idx.size(1);
    // Not a registered buffer: DDP would broadcast it at every step.
    if (!mask_.defined() || mask_.size(0) != T || mask_.device() != idx.device())
      mask_ = torch::ones({T, T}, torch::TensorOptions(torch::kBool).device(idx.device())).triu(1);
    auto x = tok(idx) + pos(torch::arange(T, torch::TensorOptions(torch::kLong).device(idx.device())));
    for (const auto& b : *blocks) x = b->as<Block>()->forward(x, mask_);
    return head(ln_f(x));
  }

  nn::Embedding tok, pos;
  nn::ModuleList blocks;
  nn::LayerNorm ln_f;
  nn::Linear head;
  torch::Tensor mask_;
};
TORCH_MODULE(CharTransformer);

// ---- the task: what differs from the loop's classifier defaults -------------

// A sample is a window of context + 1 characters: the model reads the first
// `context` and predicts each next one. Training windows tile the training
// stream; evaluation takes --test_sequences windows spread evenly over the
// held-out stream (all its windows with 0).
class CharLmTask : public ddp::loop::TrainingTask {
 public:
  CharLmTask(const Corpus& corpus, const LmOptions& o) : corpus_(corpus), o_(o) {
    const std::int64_t test_windows = (corpus.test.numel() - 1) / o.context;
    const std::int64_t n = o.test_sequences > 0 ? std::min(o.test_sequences, test_windows) : test_windows;
    test_starts_ = (torch::arange(n, torch::kLong) * test_windows / n) * o.context;
  }

  std::shared_ptr<nn::Module> make_model() override {
    model_ = CharTransformer(vocab(), o_);
    return model_.ptr();
  }
  std::int64_t train_size() const override { return (corpus_.train.numel() - 1) / o_.context; }
  std::int64_t test_size() const override { return test_starts_.size(0); }
  TaskOutput forward_train(const at::Tensor& index, c10::Device device) override {
    return forward(corpus_.train, index * o_.context, device);
  }
  TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device device) override {
    return forward(corpus_.test, test_starts_.slice(0, begin, end), device);
  }
  std::string describe() const override {
    std::int64_t params = 0;
    for (const auto& p : model_->parameters()) params += p.numel();
    return "WordNet glosses, " + std::to_string(vocab()) + " characters, " + std::to_string(train_size()) +
           " train / " + std::to_string(test_size()) + " test sequences of " + std::to_string(o_.context) +
           "; transformer " + std::to_string(o_.layers) + " layers, d_model " + std::to_string(o_.d_model) + ", " +
           std::to_string(o_.heads) + " heads, " + std::to_string(params) + " parameters";
  }

  // Cross-entropy over every position. The sum (for the test loss) is a
  // sum over sequences of their mean, so the loop's test_loss, divided by
  // the sequences, is the mean over characters.
  at::Tensor loss(const TaskOutput& out, LossReduction reduction) override {
    const auto ce = token_cross_entropy(out, false);
    return reduction == LossReduction::Sum ? ce * out.target.size(0) : ce;
  }
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& parameters,
                                                          double lr) override {
    return std::make_unique<torch::optim::AdamW>(parameters, torch::optim::AdamWOptions(lr));
  }
  // Evaluation: the characters' summed cross-entropy and their count, for
  // perplexity = exp(mean cross-entropy) and bits per character.
  std::int64_t eval_sums_size() const override { return 2; }
  void add_eval_sums(const TaskOutput& out, at::Tensor& sums) override {
    sums[0] += token_cross_entropy(out, true).to(torch::kDouble);
    sums[1] += static_cast<double>(out.target.numel());
  }
  Metrics eval_metrics(const std::vector<double>& sums) const override {
    const double ce = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    return {{"perplexity", std::exp(ce)}, {"bits_per_char", ce / std::log(2.0)}};
  }
  Monitor monitor() const override { return {"test_loss", false}; }
  std::vector<Monitor> tracked() const override { return {monitor(), {"perplexity", false}}; }
  bool drop_last() const override { return true; }

  // The alphabet goes into every checkpoint: a resume on another WordNet
  // (another alphabet) would read its token ids wrongly.
  void save_state(TaskState& s) const override { s.bytes["alphabet"] = corpus_.alphabet; }
  void load_state(const TaskState& s) override {
    const auto it = s.bytes.find("alphabet");
    if (it != s.bytes.end() && it->second != corpus_.alphabet)
      throw std::runtime_error("the checkpoint was trained on a " + std::to_string(it->second.size()) +
                               "-character alphabet, this --wordnet_dir gives " + std::to_string(vocab()) +
                               "; resume with the same WordNet, or start in a fresh --checkpoint_dir");
  }

  std::int64_t vocab() const { return static_cast<std::int64_t>(corpus_.alphabet.size()); }

 private:
  TaskOutput forward(const torch::Tensor& stream, const torch::Tensor& starts, c10::Device device) {
    // The loop's sample indices may be int32: the window offsets are long.
    const auto windows =
        stream.index({starts.to(torch::kLong).unsqueeze(1) + torch::arange(o_.context + 1, torch::kLong)});
    return {model_->forward(windows.narrow(1, 0, o_.context).to(device)),
            windows.narrow(1, 1, o_.context).to(device)};
  }
  static at::Tensor token_cross_entropy(const TaskOutput& out, bool sum) {
    namespace F = torch::nn::functional;
    return F::cross_entropy(out.prediction.reshape({-1, out.prediction.size(-1)}), out.target.reshape({-1}),
                            sum ? F::CrossEntropyFuncOptions().reduction(torch::kSum) : F::CrossEntropyFuncOptions());
  }

  const Corpus& corpus_;
  const LmOptions& o_;
  CharTransformer model_{nullptr};
  torch::Tensor test_starts_;
};

// A callback (callbacks.h): the epoch's training throughput in characters
// (tokens) per second, which is what a language model is compared by.
class TokensPerSecond : public ddp::loop::Callback {
 public:
  explicit TokensPerSecond(const LmOptions& o) : o_(o) {}
  void on_epoch_end(int rank, const ddp::loop::EpochRecord& r) override {
    if (rank == 0)
      std::cout << "epoch " << r.epoch << ": " << static_cast<std::int64_t>(r.samples_per_second * o_.context)
                << " tokens/s" << std::endl;
  }

 private:
  const LmOptions& o_;
};

// A callback: rank 0 appends every step's loss, learning rate and gradient
// norm before clipping to steps.jsonl in the checkpoint directory, the
// training curve a language model is watched by (metrics.jsonl has one line
// an epoch). A resumed run appends from the step it resumed at.
class StepLog : public ddp::loop::Callback {
 public:
  void open(const std::string& checkpoint_dir) { path_ = checkpoint_dir + "/steps.jsonl"; }
  void on_step_end(const ddp::loop::StepEnd& e) override {
    if (e.rank != 0) return;
    if (!file_.is_open()) {
      file_.open(path_, std::ios::app);
      if (!file_) throw std::runtime_error(path_ + ": cannot open for appending; check --checkpoint_dir");
    }
    file_ << "{\"global_step\": " << e.global_step << ", \"loss\": " << e.loss
          << ", \"learning_rate\": " << e.learning_rate << ", \"grad_norm\": " << e.grad_norm << "}" << std::endl;
  }

 private:
  std::string path_;
  std::ofstream file_;
};

ddp::loop::ProgramOptions lm_program_options(LmOptions& o) {
  using ddp::loop::parse_int_option;
  ddp::loop::ProgramOptions p;
  p.defaults.program = "char-lm";
  p.defaults.epochs = 1;
  p.defaults.batch_size = 32;
  p.defaults.learning_rate = 3e-3;
  p.defaults.lr_schedule = "cosine";
  p.defaults.warmup_steps = 100;
  p.defaults.grad_clip_norm = 1.0;
  p.defaults.total_steps = 2000;
  p.defaults.eval_every_steps = 500;
  p.defaults.checkpoint_dir = "char-lm-checkpoints";
  p.extra = {{"wordnet_dir", true}, {"context", true}, {"d_model", true},        {"heads", true},
             {"layers", true},      {"dropout", true}, {"test_sequences", true}};
  p.apply = [&o](const std::string& name, const std::string& value) {
    const std::string what = "--" + name;
    if (name == "wordnet_dir") {
      if (value.empty()) throw UsageError(what + ": empty path");
      o.wordnet_dir = value;
    } else if (name == "context") o.context = parse_int_option(value, what, 1, 1 << 16);
    else if (name == "d_model") o.d_model = parse_int_option(value, what, 1, 1 << 16);
    else if (name == "heads") o.heads = parse_int_option(value, what, 1, 1 << 10);
    else if (name == "layers") o.layers = parse_int_option(value, what, 1, 1 << 10);
    else if (name == "dropout") o.dropout = ddp::loop::parse_fraction_option(value, what);
    else if (name == "test_sequences") o.test_sequences = parse_int_option(value, what, 0, 1LL << 40);
  };
  return p;
}

std::string lm_usage(const ddp::loop::TrainOptions& defaults) {
  return R"(usage: ddp-launch --nproc_per_node=N char-lm [options]

Trains a small causal Transformer to predict the next character of WordNet's
glosses (Debian's wordnet-base; every 20th gloss held out), reporting the
held-out perplexity (exp of the mean cross-entropy a character) and bits per
character. Defaults: AdamW, linear warm-up then cosine decay, gradients
clipped to norm 1, 2000 steps, an evaluation every 500. Beside metrics.jsonl,
--checkpoint_dir gets steps.jsonl: each step's loss, learning rate and
gradient norm.

data and model:
  --wordnet_dir DIR     WordNet's data.noun/verb/adj/adv (default /usr/share/wordnet)
  --context N           characters a sequence (default 64)
  --d_model N           width (default 64)
  --heads N             attention heads, dividing --d_model (default 4)
  --layers N            transformer blocks (default 2)
  --dropout X           0 <= X < 1 (default 0)
  --test_sequences N    held-out sequences evaluated, spread evenly; 0 = all (default 1024)
training:
)" + ddp::loop::loop_options_usage(defaults);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddp::loop;
  LmOptions own;
  std::optional<Corpus> corpus;
  std::optional<CharLmTask> task;
  ProgramSpec spec;
  spec.options = lm_program_options(own);
  spec.usage = lm_usage(spec.options.defaults);
  spec.identity = [&]() -> std::map<std::string, std::string> {
    return {{"context", std::to_string(own.context)}, {"d_model", std::to_string(own.d_model)},
            {"heads", std::to_string(own.heads)},     {"layers", std::to_string(own.layers)},
            {"dropout", std::to_string(own.dropout)}};
  };
  const auto step_log = std::make_shared<StepLog>();
  spec.setup = [&](const TrainOptions& opts) -> TrainingTask& {
    step_log->open(opts.checkpoint_dir);
    if (own.d_model % own.heads != 0)
      throw std::invalid_argument("--d_model " + std::to_string(own.d_model) + " is not a multiple of --heads " +
                                  std::to_string(own.heads) + "; pick heads that divide it");
    corpus.emplace(read_corpus(own.wordnet_dir));
    return task.emplace(*corpus, own);
  };
  LoopHooks hooks;
  hooks.callbacks.push_back(std::make_shared<TokensPerSecond>(own));
  hooks.callbacks.push_back(step_log);
  return ddp::worker::run_main(argc, argv, [&](int c, char** v) { return run_program(c, v, spec, hooks); });
}
