#include "batch_halves.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace ddp::loop {

std::unique_ptr<BatchHalves> BatchHalves::make_if_useful(TrainingTask& task, const torch::nn::Module& model,
                                                         const std::vector<at::Tensor>& params, int world,
                                                         c10::Device device) {
  if (world != 1 || !device.is_cpu()) return nullptr;
  const int threads = at::get_num_threads();
  if (threads < 2 || !model.buffers().empty()) return nullptr;
  // The replica's own initial weights are never used (its parameters are
  // the model's). Building them must not move LibTorch's default generator:
  // a resume has restored it from the checkpoint already, and a task's
  // dropout seeds come from it (before_halves).
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor generator_state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    generator_state = gen.get_state();
  }
  std::shared_ptr<torch::nn::Module> replica = task.make_replica();
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(generator_state);
  }
  if (!replica) return nullptr;
  replica->to(device);
  std::vector<at::Tensor> own = replica->parameters();
  if (own.size() != params.size())
    throw std::logic_error("make_replica() built a model of " + std::to_string(own.size()) +
                           " parameters, make_model() one of " + std::to_string(params.size()));
  for (std::size_t i = 0; i < own.size(); ++i) {
    if (!own[i].sizes().equals(params[i].sizes()))
      throw std::logic_error("make_replica()'s parameter " + std::to_string(i) + " is not shaped as make_model()'s");
    own[i].set_data(params[i]);  // the same storage: the optimizer's step updates both
  }
  return std::unique_ptr<BatchHalves>(new BatchHalves(task, std::move(replica), params, threads));
}

BatchHalves::BatchHalves(TrainingTask& task, std::shared_ptr<torch::nn::Module> replica,
                         std::vector<at::Tensor> params, int threads)
    : task_(task), replica_(std::move(replica)), params_(std::move(params)), threads_(threads) {
  replica_params_ = replica_->parameters();
  helper_ = std::thread([this] { helper_loop(); });
}

BatchHalves::~BatchHalves() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  helper_.join();
}

void BatchHalves::helper_loop() {
  // This thread's own OpenMP team size (a per-thread setting).
  at::set_num_threads(std::max(1, threads_ - threads_ / 2));
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return has_job_ || stop_; });
      if (stop_) return;
      job = std::move(job_);
      has_job_ = false;
    }
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_error_ = error;
      done_ = true;
    }
    cv_.notify_all();
  }
}

void BatchHalves::both(const std::function<void()>& mine, std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    has_job_ = true;
    done_ = false;
    job_error_ = nullptr;
  }
  cv_.notify_all();
  std::exception_ptr error;
  try {
    mine();
  } catch (...) {
    error = std::current_exception();
  }
  std::exception_ptr theirs;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    theirs = job_error_;
  }
  if (error) std::rethrow_exception(error);
  if (theirs) std::rethrow_exception(theirs);
}

void BatchHalves::parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
  constexpr std::int64_t kSplitFrom = 1 << 16;  // elements; below, the hand-over costs more than it saves
  if (n < kSplitFrom) {
    if (n > 0) body(0, n);
    return;
  }
  const std::int64_t mid = n / 2;
  both([&] { body(0, mid); }, [&] { body(mid, n); });
}

double BatchHalves::forward(const at::Tensor& index, c10::Device device) {
  // Undefined rather than zeroed: autograd then takes each new gradient as
  // it is (no zeroing, no addition), a sparse one included.
  for (at::Tensor& p : replica_params_) p.mutable_grad() = at::Tensor();
  loss_[0] = loss_[1] = at::Tensor();
  task_.before_halves();
  const std::int64_t n = index.size(0);
  const std::int64_t first = (n + 1) / 2;
  if (first == n) {  // one sample: the model alone
    loss_[0] = task_.loss(task_.forward_train(index, device), LossReduction::Mean);
    return loss_[0].item<double>();
  }
  const double share0 = static_cast<double>(first) / static_cast<double>(n);
  const double share1 = static_cast<double>(n - first) / static_cast<double>(n);
  const at::Tensor index0 = index.slice(0, 0, first), index1 = index.slice(0, first, n);
  both([&] { loss_[0] = task_.loss(task_.forward_train(index0, device), LossReduction::Mean) * share0; },
       [&] { loss_[1] = task_.loss(task_.forward_train_replica(index1, device), LossReduction::Mean) * share1; });
  return loss_[0].item<double>() + loss_[1].item<double>();
}

void BatchHalves::backward() {
  if (!loss_[1].defined()) {
    loss_[0].backward();
    loss_[0] = at::Tensor();
    return;
  }
  both([&] { loss_[0].backward(); }, [&] { loss_[1].backward(); });
  loss_[0] = loss_[1] = at::Tensor();
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = replica_params_[i].grad();
    if (!g.defined()) continue;
    at::Tensor& mine = params_[i].mutable_grad();
    if (!mine.defined()) {
      mine = g.clone();
    } else if (mine.is_contiguous() && g.is_contiguous() && mine.sizes() == g.sizes() && !g.is_sparse()) {
      // Large ones (ddp-text's 17 MB embedding) on both threads, by halves.
      const at::Tensor flat = mine.view({-1}), add = g.view({-1});
      parallel_for(flat.numel(), [&](std::int64_t begin, std::int64_t end) {
        flat.slice(0, begin, end).add_(add.slice(0, begin, end));
      });
    } else {
      mine.add_(g);
    }
  }
}

BatchHalves::Steps::Steps(BatchHalves* h) : h_(h) {
  if (h_) at::set_num_threads(h_->threads_per_half());  // this thread's team
}

BatchHalves::Steps::~Steps() {
  if (h_) at::set_num_threads(h_->threads_);
}

}  // namespace ddp::loop
