#include "ddp/text/text_task.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <limits>
#include <mutex>
#include <numeric>

namespace ddp::text {

TextTask::TextTask(const TextData& data, const TextCnnOptions& model) : data_(data), model_options_(model) {
  model_options_.vocab_size = static_cast<std::int64_t>(data.vocab.size());
  model_options_.num_classes = static_cast<std::int64_t>(data.label_names.size());
}

std::shared_ptr<torch::nn::Module> TextTask::make_model() {
  model_ = std::make_shared<TextCnn>(model_options_);
  return model_;
}

std::shared_ptr<torch::nn::Module> TextTask::make_replica() {
  TextCnnOptions o = model_options_;
  o.dense_grad = false;
  replica_ = std::make_shared<TextCnn>(o);
  return replica_;
}

void TextTask::before_halves() {
  if (model_options_.dropout == 0) return;
  if (!model_->dropout_generator.defined()) {
    model_->dropout_generator = at::make_generator<at::CPUGeneratorImpl>();
    replica_->dropout_generator = at::make_generator<at::CPUGeneratorImpl>();
  }
  const auto seeds = torch::randint(std::numeric_limits<std::int64_t>::max(), {2}, torch::kLong);
  for (int i = 0; i < 2; ++i) {
    at::Generator& g = (i == 0 ? model_ : replica_)->dropout_generator;
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(static_cast<std::uint64_t>(seeds[i].item<std::int64_t>()));
  }
}

ddp::loop::TaskOutput TextTask::forward(TextCnn& model, const TextSplit& split, const std::int64_t* rows,
                                         std::int64_t count, c10::Device device) {
  const Packed batch = pack_sequences(split, rows, count);
  auto labels = torch::empty({count}, torch::kLong);
  auto* out = labels.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < count; ++b) out[b] = split.labels[static_cast<std::size_t>(rows[b])];
  return {model.forward_packed(batch.packed.to(device), batch.lengths.to(device)), labels.to(device)};
}

ddp::loop::TaskOutput TextTask::forward_train(const at::Tensor& index, c10::Device device) {
  const at::Tensor rows = index.contiguous();
  return forward(*model_, data_.train, rows.data_ptr<std::int64_t>(), rows.size(0), device);
}

ddp::loop::TaskOutput TextTask::forward_train_replica(const at::Tensor& index, c10::Device device) {
  const at::Tensor rows = index.contiguous();
  return forward(*replica_, data_.train, rows.data_ptr<std::int64_t>(), rows.size(0), device);
}

ddp::loop::TaskOutput TextTask::forward_test(std::int64_t begin, std::int64_t end, c10::Device device) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(end - begin));
  std::iota(rows.begin(), rows.end(), begin);
  return forward(*model_, data_.test, rows.data(), end - begin, device);
}

ddp::worker::DDPOptions TextTask::ddp_options() const {
  ddp::worker::DDPOptions o;
  o.find_unused_parameters = true;  // as the seeds wrap their model
  return o;
}

std::string TextTask::describe() const {
  return "WordNet glosses " + std::to_string(train_size()) + " train / " + std::to_string(test_size()) +
         " test, vocabulary " + std::to_string(data_.vocab.size()) + ", " + std::to_string(num_classes()) +
         " classes";
}

}  // namespace ddp::text
