#pragma once
// FusedAdam: torch::optim::Adam with its step in one pass over memory.
// LibTorch's Adam::step runs six tensor operations per parameter (two on
// each moment, the denominator, the update), each reading and writing whole
// tensors; for a model dominated by one large tensor (ddp-text's 33k x 128
// embedding: 17 MB per tensor) that is the largest single cost of the step
// (16-17 ms of ~40 ms on one thread, bench/text/text_step_profile.cpp). FusedAdam
// computes the same update element by element in one parallel loop over
// param, grad and both moments (dense float32 CPU tensors, no weight decay,
// no amsgrad); anything else takes Adam's own step. It is an Adam (same
// options, same AdamParamState, same save/load), so checkpoints, learning-
// rate changes and LibTorch's serialization see no difference; the results
// equal Adam's up to float rounding (tests/text/test_text_model.cpp). 4.5 ms
// for that model's step (vectorized, fused_adam.cpp).

#include <torch/optim/adam.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace ddp::worker {

class FusedAdam : public torch::optim::Adam {
 public:
  FusedAdam(std::vector<torch::Tensor> params, torch::optim::AdamOptions options = {})
      : torch::optim::Adam(std::move(params), options) {}

  torch::Tensor step(LossClosure closure = nullptr) override;

  // step(), and every gradient it stepped with is zero afterwards, written
  // in the same pass (in place: a gradient that is a view of DDP's bucket
  // stays one). For a loop that zeroes the gradients before each step
  // anyway: a separate zero_() pass over ddp-text's 17 MB embedding
  // gradient took 0.7 ms a step on one thread.
  torch::Tensor step_and_zero_grad(LossClosure closure = nullptr);

  // How the fused loop splits a tensor's elements among threads: calls
  // body(begin, end) over ranges that cover [0, n) once. Default (empty):
  // at::parallel_for with the calling thread's intra-op threads. The loop's
  // batch halves give their two threads (batch_halves.h), where the calling
  // thread alone has one.
  using ParallelFor = std::function<void(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body)>;
  void set_parallel_for(ParallelFor f) { parallel_for_ = std::move(f); }

 private:
  ParallelFor parallel_for_;
  torch::Tensor fused_step(LossClosure closure, bool zero_grad);
  torch::optim::AdamParamState& state_of(const torch::Tensor& p);
};

}  // namespace ddp::worker
