// regression: a small MLP fitted to a synthetic regression problem by the
// loop library, the third program on it (after ddp-train and ddp-text) and
// the one a user copies for their own: its data, its model, and what
// differs from the loop's classifier defaults. The loop brings the rest:
// DistributedSampler, DDP, checkpoints and resume, metrics.jsonl, the plateau
// schedule, the best-epoch lines.
//   ddp-launch --standalone --nproc_per_node=2 ./regression --epochs 5
#include <torch/torch.h>

#include <optional>

#include "ddp/loop/program_setup.h"
#include "ddp/loop/train_options.h"
#include "ddp/loop/training_task.h"
#include "ddp/worker/run_main.h"

namespace {

namespace F = torch::nn::functional;
using ddp::loop::LossReduction;
using ddp::loop::Metrics;
using ddp::loop::Monitor;
using ddp::loop::TaskOutput;

// y = sin(x . a) + (x . b) / 2 + noise, x ~ N(0, 1)^8: the same on every
// rank (a fixed generator), split 4096 train / 1024 test.
struct Data {
  torch::Tensor x_train, y_train, x_test, y_test;
  explicit Data(std::int64_t samples) {
    auto gen = at::detail::createCPUGenerator(1234);
    const auto x = at::randn({samples, 8}, gen);
    const auto a = at::randn({8}, gen) / 2, b = at::randn({8}, gen);
    const auto y = torch::sin(x.matmul(a)) + x.matmul(b) / 2 + 0.05 * at::randn({samples}, gen);
    const std::int64_t test = samples / 5;
    x_train = x.narrow(0, test, samples - test);
    y_train = y.narrow(0, test, samples - test);
    x_test = x.narrow(0, 0, test);
    y_test = y.narrow(0, 0, test);
  }
};

class RegressionTask : public ddp::loop::TrainingTask {
 public:
  explicit RegressionTask(const Data& data) : data_(data) {}

  std::shared_ptr<torch::nn::Module> make_model() override {
    model_ = torch::nn::Sequential(torch::nn::Linear(8, 64), torch::nn::ReLU(), torch::nn::Linear(64, 1));
    return model_.ptr();
  }
  std::int64_t train_size() const override { return data_.x_train.size(0); }
  std::int64_t test_size() const override { return data_.x_test.size(0); }
  TaskOutput forward_train(const at::Tensor& index, c10::Device device) override {
    return forward(data_.x_train.index_select(0, index), data_.y_train.index_select(0, index), device);
  }
  TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device device) override {
    return forward(data_.x_test.slice(0, begin, end), data_.y_test.slice(0, begin, end), device);
  }
  std::string describe() const override {
    return "synthetic regression " + std::to_string(train_size()) + " train / " + std::to_string(test_size()) + " test";
  }

  // Mean squared error instead of cross-entropy.
  at::Tensor loss(const TaskOutput& out, LossReduction reduction) override {
    return F::mse_loss(out.prediction, out.target,
                       reduction == LossReduction::Sum ? F::MSELossFuncOptions(torch::kSum) : F::MSELossFuncOptions());
  }
  // Evaluation: the sum of absolute errors, for the mean absolute error.
  std::int64_t eval_sums_size() const override { return 1; }
  void add_eval_sums(const TaskOutput& out, at::Tensor& sums) override {
    sums[0] += (out.prediction - out.target).abs().sum().to(torch::kDouble);
  }
  Metrics eval_metrics(const std::vector<double>& sums) const override {
    return {{"mae", sums[0] / static_cast<double>(test_size())}};
  }
  // Lower is better: the schedule and the best checkpoint follow the test loss.
  Monitor monitor() const override { return {"test_loss", false}; }
  std::vector<Monitor> tracked() const override { return {monitor(), {"mae", false}}; }

 private:
  TaskOutput forward(const torch::Tensor& x, const torch::Tensor& y, c10::Device device) {
    return {model_->forward(x.to(device)).squeeze(1), y.to(device)};
  }
  const Data& data_;
  torch::nn::Sequential model_{nullptr};
};

}  // namespace

int main(int argc, char** argv) {
  using namespace ddp::loop;
  std::int64_t samples = 5120;
  std::optional<Data> data;
  std::optional<RegressionTask> task;
  ProgramSpec spec;
  spec.options.defaults.program = "regression";
  spec.options.defaults.epochs = 5;
  spec.options.defaults.learning_rate = 3e-3;
  spec.options.defaults.checkpoint_dir = "regression-checkpoints";
  spec.options.extra = {{"samples", true}};  // --samples N
  spec.options.apply = [&](const std::string&, const std::string& value) {
    samples = parse_int_option(value, "--samples", 100, 1 << 24);
  };
  spec.usage = "usage: ddp-launch --nproc_per_node=N regression [options]\n\noptions:\n"
               "  --samples N           samples of the synthetic data set, a fifth for testing (default 5120)\n" +
               loop_options_usage(spec.options.defaults);
  spec.setup = [&](const TrainOptions&) -> TrainingTask& {
    data.emplace(samples);
    return task.emplace(*data);
  };
  return ddp::worker::run_main(argc, argv, [&](int c, char** v) { return run_program(c, v, spec); });
}
