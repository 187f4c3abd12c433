#include "ddp/fashion/fashion_task.h"

#include <torch/torch.h>

namespace ddp::fashion {
namespace {

// Fashion-MNIST's training-set pixel mean and std (after /255); the Python
// reference normalizes the same way.
constexpr double kPixelMean = 0.2860;
constexpr double kPixelStd = 0.3530;

}  // namespace

FashionTask::FashionTask(const FashionMnist& data) {
  const auto alias = [](const LabeledImages& split) {
    const auto n = static_cast<std::int64_t>(split.count);
    auto* pixels = const_cast<std::uint8_t*>(split.pixels.data());
    auto* labels = const_cast<std::uint8_t*>(split.labels.data());
    return Split{torch::from_blob(pixels, {n, kImageSide, kImageSide}, torch::kUInt8),
                 torch::from_blob(labels, {n}, torch::kUInt8)};
  };
  train_ = alias(data.train);
  test_ = alias(data.test);
}

std::shared_ptr<torch::nn::Module> FashionTask::make_model() {
  model_ = std::make_shared<FashionCnn>();
  return model_;
}

std::shared_ptr<torch::nn::Module> FashionTask::make_replica() {
  replica_ = std::make_shared<FashionCnn>();
  return replica_;
}

std::int64_t FashionTask::train_size() const { return train_.labels.size(0); }
std::int64_t FashionTask::test_size() const { return test_.labels.size(0); }

TaskOutput FashionTask::forward(FashionCnn& model, const Split& split, const at::Tensor& index, c10::Device device) {
  auto x = split.images.index_select(0, index)
               .to(torch::kFloat)
               .div_(255.0)
               .sub_(kPixelMean)
               .div_(kPixelStd)
               .unsqueeze_(1)
               .to(device);
  return {model.forward(x), split.labels.index_select(0, index).to(device, torch::kLong)};
}

TaskOutput FashionTask::forward_train(const at::Tensor& index, c10::Device device) {
  return forward(*model_, train_, index, device);
}

TaskOutput FashionTask::forward_train_replica(const at::Tensor& index, c10::Device device) {
  return forward(*replica_, train_, index, device);
}

TaskOutput FashionTask::forward_test(std::int64_t begin, std::int64_t end, c10::Device device) {
  return forward(*model_, test_, torch::arange(begin, end, torch::kLong), device);
}

std::string FashionTask::describe() const {
  return "Fashion-MNIST " + std::to_string(train_size()) + " train / " + std::to_string(test_size()) + " test";
}

}  // namespace ddp::fashion
