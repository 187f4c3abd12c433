#pragma once
// The loop's in-process test fixture (test_loop_in_process.cpp,
// test_checkpoint_dir_in_process.cpp, test_step_checkpoints_in_process.cpp): a tiny fake task (a classifier or a
// regression on 136 fixed samples), the options of a short run, and
// run_training on 2 ranks as threads over an in-memory store
// (ddp/worker/in_process.h). No launcher, no data set, no process started.
#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/loop/trainer.h"
#include "ddp/loop/training_task.h"
#include "ddp/worker/fused_adam.h"
#include "ddp/worker/in_process.h"
#include "ddp/worker/process_group.h"

namespace loop_test {

using namespace ddp::loop;
using ddp::worker::ProcessGroup;

// 96 training and 40 test samples of 4 features; three classes for the
// classifier (the default loss and metrics), a smooth target for the
// regression. The weights come from a fixed formula, not from LibTorch's
// global generator, which both rank threads use at once.
class FakeTask : public TrainingTask {
 public:
  explicit FakeTask(bool regression, int nan_rank = -1, std::int64_t nan_step = -1)
      : regression_(regression), nan_rank_(nan_rank), nan_step_(nan_step) {
    x_ = torch::sin(torch::arange(136 * 4, torch::kFloat).reshape({136, 4}) * 0.37);
    const auto score = x_.matmul(torch::tensor({1.0f, -2.0f, 0.5f, 1.5f}));
    y_ = regression_ ? score : ((score > -0.5).to(torch::kLong) + (score > 0.8).to(torch::kLong));
  }
  void set_rank(int rank) { rank_ = rank; }
  // Training inputs with noise drawn from LibTorch's default generator, as
  // a dropout draws: a resume must continue the generator. One rank only
  // (rank threads would share the generator in an order that varies).
  void add_noise() { noise_ = true; }
  // A replica for the batch's second half (make_replica); with `buffer`, a
  // model that has a buffer, which the loop must not split; with `outputs`,
  // a replica of another shape (a task's mistake).
  void offer_replica(bool buffer = false, std::int64_t outputs = 0) {
    replica_offered_ = true;
    buffer_ = buffer;
    replica_outputs_ = outputs;
  }
  int replica_forwards() const { return replica_forwards_; }
  // An optimizer over the weight alone (the bias is not stepped), a
  // FusedAdam or LibTorch's Adam.
  enum class WeightOnly { No, FusedAdam, Adam };
  void step_weight_only(WeightOnly which) { weight_only_ = which; }
  // Plain SGD (lr * gradient: a step shows the gradient it used).
  void use_sgd() { sgd_ = true; }
  // Keeps state of its own in the checkpoints (save_state / load_state):
  // the forwards it ran, a text and bytes; what a resume gave it back.
  void keep_state() { keep_state_ = true; }
  const TaskState& loaded_state() const { return loaded_; }
  bool state_loaded() const { return state_loaded_; }
  void save_state(TaskState& s) const override {
    if (!keep_state_) return;
    s.numbers["forwards"] = static_cast<double>(steps_);
    s.strings["vocab"] = "a b c";
    s.bytes["blob"] = std::string("\0\1\xff", 3);
  }
  void load_state(const TaskState& s) override {
    state_loaded_ = true;
    loaded_ = s;
  }
  std::int64_t largest_batch() const { return largest_batch_; }
  at::Tensor bias_grad() const { return model_->bias.grad().defined() ? model_->bias.grad().clone() : at::Tensor(); }
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& parameters,
                                                          double lr) override {
    if (weight_only_ == WeightOnly::FusedAdam)
      return std::make_unique<ddp::worker::FusedAdam>(std::vector<at::Tensor>{model_->weight}, torch::optim::AdamOptions(lr));
    if (sgd_) return std::make_unique<torch::optim::SGD>(parameters, torch::optim::SGDOptions(lr));
    if (weight_only_ == WeightOnly::Adam)
      return std::make_unique<torch::optim::Adam>(std::vector<at::Tensor>{model_->weight}, torch::optim::AdamOptions(lr));
    return TrainingTask::make_optimizer(parameters, lr);
  }

  std::shared_ptr<torch::nn::Module> make_model() override {
    model_ = torch::nn::Linear(4, regression_ ? 1 : 3);
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) p.copy_(torch::cos(torch::arange(p.numel(), torch::kFloat)).reshape(p.sizes()) * 0.1);
    if (buffer_) model_->register_buffer("seen", torch::zeros({1}));
    return model_.ptr();
  }
  std::shared_ptr<torch::nn::Module> make_replica() override {
    if (!replica_offered_) return nullptr;
    // Its weights are the model's (the loop shares them).
    replica_ = torch::nn::Linear(4, replica_outputs_ ? replica_outputs_ : regression_ ? 1 : 3);
    return replica_.ptr();
  }
  TaskOutput forward_train_replica(const at::Tensor& index, c10::Device) override {
    ++replica_forwards_;
    auto p = replica_->forward(x_.index_select(0, index));
    return {regression_ ? p.squeeze(1) : p, y_.index_select(0, index)};
  }
  std::int64_t train_size() const override { return 96; }
  std::int64_t test_size() const override { return 40; }
  int num_classes() const override { return regression_ ? 0 : 3; }
  TaskOutput forward_train(const at::Tensor& index, c10::Device) override {
    ++steps_;
    largest_batch_ = std::max(largest_batch_, index.numel());
    if (steps_ == nan_step_) weights_at_nan_step_ = flat_weights();
    at::Tensor x = x_.index_select(0, index);
    if (noise_) x = x + 0.3 * torch::randn_like(x);
    return out(x, y_.index_select(0, index));
  }
  // Whether the model's weights are those it had when the step with the
  // non-finite loss began (the loop must stop before that step's update).
  bool weights_as_at_nan_step() const {
    return weights_at_nan_step_.defined() && torch::equal(flat_weights(), weights_at_nan_step_);
  }
  TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device) override {
    return out(x_.slice(0, 96 + begin, 96 + end), y_.slice(0, 96 + begin, 96 + end));
  }
  std::string describe() const override { return regression_ ? "fake regression" : "fake classes"; }

  at::Tensor loss(const TaskOutput& o, LossReduction r) override {
    namespace F = torch::nn::functional;
    at::Tensor l = !regression_ ? TrainingTask::loss(o, r)
                   : r == LossReduction::Sum ? F::mse_loss(o.prediction, o.target, F::MSELossFuncOptions(torch::kSum))
                                             : F::mse_loss(o.prediction, o.target);
    if (rank_ == nan_rank_ && steps_ == nan_step_ && r == LossReduction::Mean) l = l * std::nan("");
    return l;
  }
  std::int64_t eval_sums_size() const override { return regression_ ? 1 : TrainingTask::eval_sums_size(); }
  void add_eval_sums(const TaskOutput& o, at::Tensor& sums) override {
    if (!regression_) return TrainingTask::add_eval_sums(o, sums);
    sums[0] += (o.prediction - o.target).abs().sum().to(torch::kDouble);
  }
  Metrics eval_metrics(const std::vector<double>& sums) const override {
    if (!regression_) return TrainingTask::eval_metrics(sums);
    return {{"mae", sums[0] / 40.0}};
  }
  Monitor monitor() const override { return regression_ ? Monitor{"test_loss", false} : TrainingTask::monitor(); }
  std::vector<Monitor> tracked() const override {
    return regression_ ? std::vector<Monitor>{monitor()} : TrainingTask::tracked();
  }

 private:
  at::Tensor flat_weights() const {
    std::vector<at::Tensor> flat;
    for (const auto& p : model_->parameters()) flat.push_back(p.detach().flatten().clone());
    return torch::cat(flat);
  }
  TaskOutput out(const at::Tensor& x, const at::Tensor& y) {
    auto p = model_->forward(x);
    return {regression_ ? p.squeeze(1) : p, y};
  }
  bool regression_;
  int nan_rank_;
  std::int64_t nan_step_;
  int rank_ = 0;
  std::int64_t steps_ = 0;
  bool replica_offered_ = false, buffer_ = false, noise_ = false, sgd_ = false, keep_state_ = false;
  bool state_loaded_ = false;
  TaskState loaded_;
  std::int64_t largest_batch_ = 0;
  WeightOnly weight_only_ = WeightOnly::No;
  std::int64_t replica_outputs_ = 0;
  std::atomic<int> replica_forwards_{0};
  at::Tensor x_, y_, weights_at_nan_step_;
  torch::nn::Linear model_{nullptr}, replica_{nullptr};
};

inline TrainOptions options(const std::string& dir, int epochs) {
  TrainOptions o;
  o.program = "loop-test";
  o.epochs = epochs;
  o.batch_size = 8;
  o.learning_rate = 0.05;
  o.checkpoint_dir = dir;
  o.log_interval = 1000;
  o.seed = 5;
  return o;
}

struct RankRun {
  std::string out;
  std::string error;
  TrainResult result;
  bool weights_as_at_nan_step = false;  // FakeTask::weights_as_at_nan_step at the end
};

// run_training on `world` ranks as threads, each with the fake task that
// `setup` (when given) changed; each rank's output, result or error.
inline std::vector<RankRun> train_world(int world, const TrainOptions& o, bool regression, const LoopHooks& hooks,
                                        const std::function<void(FakeTask&)>& setup, int nan_rank = -1,
                                        std::int64_t nan_step = -1) {
  std::vector<RankRun> runs(static_cast<std::size_t>(world));
  ddp::worker::run_ranks_in_process(world, [&](const std::shared_ptr<ProcessGroup>& pg) {
    FakeTask task(regression, nan_rank, nan_step);
    task.set_rank(pg->rank());
    if (setup) setup(task);
    std::ostringstream out;
    RankRun& run = runs[static_cast<std::size_t>(pg->rank())];
    try {
      run.result = run_training(o, pg, task, out, false, hooks);
    } catch (const std::exception& e) {
      run.error = e.what();
    }
    run.weights_as_at_nan_step = task.weights_as_at_nan_step();
    run.out = out.str();
  });
  return runs;
}

// run_training on 2 ranks as threads; each rank's output, result or error.
inline std::vector<RankRun> train(const TrainOptions& o, bool regression, const LoopHooks& hooks = {}, int nan_rank = -1,
                                  std::int64_t nan_step = -1) {
  return train_world(2, o, regression, hooks, {}, nan_rank, nan_step);
}

inline std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace loop_test
