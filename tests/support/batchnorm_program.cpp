#include "batchnorm_program.h"

#include <torch/torch.h>

#include <optional>

#include "ddp/loop/program_setup.h"
#include "ddp/loop/train_options.h"
#include "ddp/loop/training_task.h"

namespace ddp::test {
namespace {

// 1024 training and 256 test samples of 8 features, the same on every rank
// (a fixed generator); the class: which of three projections is largest.
class BatchNormTask final : public ddp::loop::TrainingTask {
 public:
  BatchNormTask() {
    auto gen = at::detail::createCPUGenerator(77);
    x_ = at::randn({1280, 8}, gen);
    y_ = x_.matmul(at::randn({8, 3}, gen)).argmax(1);
  }
  std::shared_ptr<torch::nn::Module> make_model() override {
    model_ = torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16), torch::nn::ReLU(),
                                   torch::nn::Linear(16, 3));
    return model_.ptr();
  }
  std::int64_t train_size() const override { return 1024; }
  std::int64_t test_size() const override { return 256; }
  int num_classes() const override { return 3; }
  ddp::loop::TaskOutput forward_train(const at::Tensor& index, c10::Device device) override {
    return {model_->forward(x_.index_select(0, index).to(device)), y_.index_select(0, index).to(device)};
  }
  ddp::loop::TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device device) override {
    return {model_->forward(x_.slice(0, 1024 + begin, 1024 + end).to(device)),
            y_.slice(0, 1024 + begin, 1024 + end).to(device)};
  }
  std::string describe() const override { return "synthetic classes, an MLP with BatchNorm1d"; }

 private:
  at::Tensor x_, y_;
  torch::nn::Sequential model_{nullptr};
};

}  // namespace

int batchnorm_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks) {
  std::optional<BatchNormTask> task;
  ddp::loop::ProgramSpec spec;
  spec.options.defaults.program = "batchnorm";
  spec.usage = "usage: ddp-launch --nproc_per_node=N ddp-batchnorm-faults [options] (a test program)\n\noptions:\n" +
               ddp::loop::loop_options_usage(spec.options.defaults);
  spec.setup = [&](const ddp::loop::TrainOptions&) -> ddp::loop::TrainingTask& { return task.emplace(); };
  return ddp::loop::run_program(argc, argv, spec, hooks);
}

}  // namespace ddp::test
