#pragma once
// ddp-text's model: TextCNN (Kim 2014) over word embeddings, as the seeds'
// BruceCNN. Embedding(V, E, padding_idx 0) -> for each width w in 3, 4, 5:
// Conv1d(E, F, w) -> ReLU -> max over the sequence's own windows -> concat
// (3F) -> dropout -> Linear(3F, C). Parameter names (embedding, conv3,
// conv4, conv5, fc) match bench/text/python_text.py, so weights load into
// either.
//
// A sequence of length n is seen as padded with <pad> (id 0, a zero
// embedding) to max(n, 5), and only the windows inside that length count
// for the max, so the output does not depend on how far a batch is padded.
// Two inputs compute the same function:
//   forward(tokens [B, L] long padded with 0, L >= max(5, lengths), lengths [B])
//     stock layers, the Python twin's formulation;
//   forward_packed(packed [T] long, lengths [B])
//     the sequences one after another, each padded only to max(n, 5)
//     (pack_sequences), convolved as one stream: no work for the padding of
//     the longest sequence. The CPU path of ddp-text's training.

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <vector>

#include "ddp/text/text_dataset.h"

namespace ddp::text {

inline constexpr int kMinSequence = 5;  // the widest filter

struct TextCnnOptions {
  std::int64_t vocab_size = 0;
  std::int64_t embedding_dim = 128;
  std::int64_t num_filters = 100;  // per width
  std::int64_t num_classes = 45;
  double dropout = 0.5;
  // The embedding's backward gives only the rows of the batch's tokens
  // (Embedding's sparse mode), which autograd adds in place into a dense
  // .grad that forward makes sure exists: the same dense gradient, without
  // building a zero [V, E] tensor and adding all of it every step. Off: the
  // stock dense backward.
  bool sparse_gradient = true;
  // Off for the replica of the batch halves (TextTask::make_replica): its
  // sparse gradient stays sparse and the loop adds it into the model's
  // dense one, so forward leaves its .grad alone.
  bool dense_grad = true;
  // Test variant: a parameter `unused` (Linear(3F, C)) that forward never
  // touches, for DDP's find_unused_parameters.
  bool with_unused = false;
};

struct TextCnn : torch::nn::Module {
  explicit TextCnn(const TextCnnOptions& o);

  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& lengths);
  torch::Tensor forward_packed(const torch::Tensor& packed, const torch::Tensor& lengths);

  TextCnnOptions options;
  torch::nn::Embedding embedding{nullptr};
  torch::nn::Conv1d conv3{nullptr}, conv4{nullptr}, conv5{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::Linear unused{nullptr};
  // When defined, dropout draws its mask from this generator (the batch
  // halves: one each for the model and its replica, TextTask::before_halves
  // seeds both), else from LibTorch's default generator as nn::Dropout does.
  at::Generator dropout_generator;

 private:
  torch::Tensor embed(const torch::Tensor& tokens);
  torch::Tensor classify(const std::vector<torch::Tensor>& pooled);
  torch::Tensor drop(const torch::Tensor& features);
};

// The packed layout of forward_packed: the rows' tokens (a split as
// text_dataset.h loads it: each row has 1..max_length ids), each followed by
// zeros up to max(length, 5), one after another.
struct Packed {
  torch::Tensor packed;   // long [T]
  torch::Tensor lengths;  // long [B]
};
Packed pack_sequences(const TextSplit& split, const std::int64_t* rows, std::int64_t count);
// The same sequences as a padded batch [B, max(5, longest)] for forward().
torch::Tensor pad_packed(const Packed& p);

}  // namespace ddp::text
