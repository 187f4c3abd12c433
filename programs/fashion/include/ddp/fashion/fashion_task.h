#pragma once
// ddp-train's task for the loop library (ddp/loop/training_task.h):
// Fashion-MNIST kept as bytes (fashion_mnist.h), each batch converted to
// normalized float [B, 1, 28, 28], and the CNN of model.h.

#include <memory>

#include "ddp/fashion/fashion_mnist.h"
#include "ddp/fashion/model.h"
#include "ddp/loop/training_task.h"

namespace ddp::fashion {

using ddp::loop::TaskOutput;

class FashionTask : public ddp::loop::TrainingTask {
 public:
  // `data` must outlive the task (its tensors alias the loader's bytes).
  explicit FashionTask(const FashionMnist& data);

  std::shared_ptr<torch::nn::Module> make_model() override;
  std::shared_ptr<torch::nn::Module> make_replica() override;
  std::int64_t train_size() const override;
  std::int64_t test_size() const override;
  int num_classes() const override { return kNumClasses; }
  TaskOutput forward_train(const at::Tensor& index, c10::Device device) override;
  TaskOutput forward_train_replica(const at::Tensor& index, c10::Device device) override;
  TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device device) override;
  std::string describe() const override;

 private:
  struct Split {
    at::Tensor images;  // uint8 [N, 28, 28]
    at::Tensor labels;  // uint8 [N]
  };
  static TaskOutput forward(FashionCnn& model, const Split& split, const at::Tensor& index, c10::Device device);

  Split train_, test_;
  std::shared_ptr<FashionCnn> model_, replica_;
};

}  // namespace ddp::fashion
