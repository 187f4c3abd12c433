#pragma once
// A batch in two halves (training_task.h: make_replica): in a world of one
// process with two or more threads, each step's batch is split in two and
// the halves run at once, the first on the task's model in the calling
// thread, the second on the task's replica in a thread of this class, each
// with half the intra-op threads; the replica's gradients are then added to
// the model's. The replica's parameters share the model's storage, so the
// optimizer's step updates both and nothing is copied. The same sums as the
// whole batch (each half's mean loss weighted by its share), in another
// order; faster because small kernels on one thread leave no thread
// waiting for the other (docs/benchmarks.md). Internal to the loop library.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp/loop/training_task.h"

namespace torch::nn {
class Module;
}

namespace ddp::loop {

class BatchHalves {
 public:
  // nullptr unless the split applies: a world of one process (`world`), a
  // CPU device, two or more intra-op threads, a model without buffers (the
  // two halves would update them at once) and a task with a replica.
  // `params` are the model's, which the optimizer steps.
  static std::unique_ptr<BatchHalves> make_if_useful(TrainingTask& task, const torch::nn::Module& model,
                                                     const std::vector<at::Tensor>& params, int world,
                                                     c10::Device device);
  ~BatchHalves();
  BatchHalves(const BatchHalves&) = delete;
  BatchHalves& operator=(const BatchHalves&) = delete;

  // The threads the first half runs with: half of the process's (at least 1,
  // as there are 2 or more); the second half has the rest.
  int threads_per_half() const { return threads_ / 2; }

  // Zeroes the replica's gradients in place, then runs both halves' forward
  // and loss (the mean of each, weighted by its share of the n samples of
  // `index`). Returns the batch's mean loss.
  double forward(const at::Tensor& index, c10::Device device);
  // Both halves' backward, then the replica's gradients added to the
  // model's (whose gradient tensors the caller has zeroed).
  void backward();

  // body(begin, end) over [0, n): the two halves of the range at once, on
  // this thread and the helper, or all of it here when n is small (a
  // hand-over to the helper costs tens of microseconds). For the
  // optimizer's step, which runs between the halves' backward and the next
  // forward, while the helper idles.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body);

  // For the training steps of an epoch: the calling thread runs with half
  // the threads, and with all of them again afterwards (evaluation). Not
  // per phase: a team size that changes each step costs more than the
  // optimizer's step on one thread (oneDNN keeps its kernels per team size;
  // measured 1.9k instead of 4.8k samples/s for ddp-train).
  class Steps {
   public:
    explicit Steps(BatchHalves* h);
    ~Steps();
    Steps(const Steps&) = delete;
    Steps& operator=(const Steps&) = delete;

   private:
    BatchHalves* h_;
  };

 private:
  BatchHalves(TrainingTask& task, std::shared_ptr<torch::nn::Module> replica, std::vector<at::Tensor> params,
              int threads);
  // Runs `job` in the helper thread while `mine` runs here; rethrows the
  // first exception of either.
  void both(const std::function<void()>& mine, std::function<void()> job);
  void helper_loop();

  TrainingTask& task_;
  std::shared_ptr<torch::nn::Module> replica_;
  std::vector<at::Tensor> params_, replica_params_;
  int threads_;
  at::Tensor loss_[2];

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool has_job_ = false, done_ = false, stop_ = false;
  std::exception_ptr job_error_;
  std::thread helper_;
};

}  // namespace ddp::loop
