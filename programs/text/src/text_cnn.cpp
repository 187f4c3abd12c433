#include "ddp/text/text_cnn.h"

#include <torch/torch.h>

#include <algorithm>
#include <stdexcept>

namespace ddp::text {
namespace {

namespace nn = torch::nn;

constexpr std::int64_t kWidths[] = {3, 4, 5};
constexpr std::int64_t kStreamQuantum = 64;

// Sequence lengths as the filters see them: at least the widest filter.
torch::Tensor effective_lengths(const torch::Tensor& lengths) { return lengths.clamp_min(kMinSequence); }

}  // namespace

TextCnn::TextCnn(const TextCnnOptions& o) : options(o) {
  if (o.vocab_size <= 2) throw std::invalid_argument("TextCnn: vocabulary of " + std::to_string(o.vocab_size) +
                                                     " tokens; it needs <pad>, <unk> and at least one word");
  embedding = register_module("embedding", nn::Embedding(nn::EmbeddingOptions(o.vocab_size, o.embedding_dim).padding_idx(0).sparse(o.sparse_gradient)));
  conv3 = register_module("conv3", nn::Conv1d(nn::Conv1dOptions(o.embedding_dim, o.num_filters, 3)));
  conv4 = register_module("conv4", nn::Conv1d(nn::Conv1dOptions(o.embedding_dim, o.num_filters, 4)));
  conv5 = register_module("conv5", nn::Conv1d(nn::Conv1dOptions(o.embedding_dim, o.num_filters, 5)));
  dropout = register_module("dropout", nn::Dropout(nn::DropoutOptions(o.dropout)));
  fc = register_module("fc", nn::Linear(3 * o.num_filters, o.num_classes));
  if (o.with_unused) unused = register_module("unused", nn::Linear(3 * o.num_filters, o.num_classes));
}

torch::Tensor TextCnn::embed(const torch::Tensor& tokens) {
  // A sparse gradient is only ever added into a dense one (DDP's buckets
  // and the optimizers take dense gradients); the first backward finds this
  // one, on the parameter's device.
  auto& weight = embedding->weight;
  if (options.sparse_gradient && options.dense_grad && torch::GradMode::is_enabled() && !weight.grad().defined())
    weight.mutable_grad() = torch::zeros_like(weight);
  return embedding->forward(tokens);
}

torch::Tensor TextCnn::drop(const torch::Tensor& features) {
  if (!dropout_generator.defined() || !is_training() || options.dropout == 0) return dropout->forward(features);
  // Inverted dropout as nn::Dropout's: kept features scaled by 1 / (1 - p).
  const double keep = 1 - options.dropout;
  return features * torch::empty_like(features).bernoulli_(keep, dropout_generator).div_(keep);
}

torch::Tensor TextCnn::classify(const std::vector<torch::Tensor>& pooled) {
  auto z = drop(torch::cat(pooled, 1));
  if (!z.device().is_cpu()) return fc->forward(z);
  // On the CPU the Linear layer as a 1x1 convolution (the same products and
  // sums): Debian's LibTorch does GEMM with reference BLAS, convolutions go
  // through oneDNN (1.8 ms a step less, measured; as ddp-train's model).
  const auto classes = fc->weight.size(0), features = fc->weight.size(1);
  return torch::conv2d(z.view({z.size(0), features, 1, 1}), fc->weight.view({classes, features, 1, 1}), fc->bias)
      .flatten(1);
}

torch::Tensor TextCnn::forward(const torch::Tensor& tokens, const torch::Tensor& lengths) {
  const auto L = tokens.size(1);
  if (L < kMinSequence) throw std::invalid_argument("TextCnn::forward: batch padded to " + std::to_string(L) +
                                                    " tokens, it needs at least " + std::to_string(kMinSequence));
  auto e = embed(tokens).transpose(1, 2).contiguous();  // [B, E, L]
  const auto eff = effective_lengths(lengths).unsqueeze(1);
  std::vector<torch::Tensor> pooled;
  nn::Conv1d convs[] = {conv3, conv4, conv5};
  for (int i = 0; i < 3; ++i) {
    auto h = torch::relu(convs[i]->forward(e));  // [B, F, L - w + 1]
    auto t = torch::arange(L - kWidths[i] + 1, lengths.options()).unsqueeze(0);
    auto valid = (t < eff - kWidths[i] + 1).unsqueeze(1);  // [B, 1, L - w + 1]
    pooled.push_back(std::get<0>(h.masked_fill(valid.logical_not(), 0).max(2)));
  }
  return classify(pooled);
}

torch::Tensor TextCnn::forward_packed(const torch::Tensor& packed, const torch::Tensor& lengths) {
  // Start of each sequence in the stream, and its windows' count per width.
  const auto eff = effective_lengths(lengths);
  const auto starts = eff.cumsum(0) - eff;
  // [1, E, T]: the stream as one sequence. Windows that straddle two
  // sequences are computed and never looked at (w - 1 per sequence, against
  // the longest sequence's padding in a padded batch).
  // The stream padded with zero columns to a multiple of kStreamQuantum:
  // oneDNN builds (JIT-compiles) its convolution kernels per shape, and a
  // stream's length differs from batch to batch. Windows that reach into the
  // padding are never looked at, as the straddling ones.
  auto rows = embed(packed);  // [T, E]
  const auto T = rows.size(0);
  const auto padded = (T + kStreamQuantum - 1) / kStreamQuantum * kStreamQuantum;
  if (padded != T) rows = torch::constant_pad_nd(rows, {0, 0, 0, padded - T}, 0);
  // Contiguous: a transposed view looks channels-last to the convolution,
  // whose backward then leaves oneDNN for a path ~25x slower (measured).
  auto e = rows.t().contiguous().unsqueeze(0);
  std::vector<torch::Tensor> pooled;
  nn::Conv1d convs[] = {conv3, conv4, conv5};
  for (int i = 0; i < 3; ++i) {
    const std::int64_t w = kWidths[i];
    auto h = convs[i]->forward(e).squeeze(0);  // [F, T - w + 1]
    // Window t of sequence b is column starts[b] + min(t, last[b]); a short
    // sequence's row repeats its last window, which leaves the max alone.
    const auto last = (eff - w).unsqueeze(1);
    const auto most = (eff - w + 1).max().item<std::int64_t>();
    auto t = torch::arange(most, lengths.options()).unsqueeze(0);
    auto columns = (starts.unsqueeze(1) + torch::min(t, last)).flatten();
    auto windows = h.index_select(1, columns).view({h.size(0), lengths.size(0), most});
    // relu(max(x)) == max(relu(x)): ReLU is monotonic, so it runs on [B, F].
    pooled.push_back(torch::relu(std::get<0>(windows.max(2))).t());
  }
  return classify(pooled);
}

Packed pack_sequences(const TextSplit& split, const std::int64_t* rows, std::int64_t count) {
  auto lengths = torch::empty({count}, torch::kLong);
  auto* len = lengths.data_ptr<std::int64_t>();
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < count; ++b) {
    len[b] = split.length(static_cast<std::size_t>(rows[b]));
    total += std::max<std::int64_t>(len[b], kMinSequence);
  }
  auto packed = torch::zeros({total}, torch::kLong);
  auto* out = packed.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < count; ++b) {
    const std::int32_t* in = split.tokens.data() + split.offsets[static_cast<std::size_t>(rows[b])];
    std::copy(in, in + len[b], out);
    out += std::max<std::int64_t>(len[b], kMinSequence);
  }
  return {packed, lengths};
}

torch::Tensor pad_packed(const Packed& p) {
  const auto count = p.lengths.size(0);
  const auto* len = p.lengths.data_ptr<std::int64_t>();
  std::int64_t longest = kMinSequence;
  for (std::int64_t b = 0; b < count; ++b) longest = std::max(longest, len[b]);
  auto padded = torch::zeros({count, longest}, torch::kLong);
  const auto* in = p.packed.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < count; ++b) {
    std::copy(in, in + len[b], padded.data_ptr<std::int64_t>() + b * longest);
    in += std::max<std::int64_t>(len[b], kMinSequence);
  }
  return padded;
}

}  // namespace ddp::text
