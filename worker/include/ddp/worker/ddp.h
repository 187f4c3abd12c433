#pragma once
// DistributedDataParallel: data-parallel training of any torch::nn::Module,
// the C++ counterpart of torch.nn.parallel.DistributedDataParallel.
// It owns a Reducer (reducer.h: the gradient buckets and the hooks on the
// parameters' gradient accumulators); the module stays the caller's. At
// construction it checks that the parameters (shapes, dtypes, which require
// grad) agree across ranks, broadcasts parameters and buffers from rank 0 and
// assigns the buckets (bucket_assignment.h). A backward that follows a
// forward through DDP (forward() or prepare_forward()) is reduced: by default
// each .grad is a view of its slice of a flat bucket, so autograd accumulates
// straight into the bucket; a full bucket is divided by the world size and
// starts its async allreduce while backward continues, and at the end of
// backward .grad holds the averages, so `loss.backward(); opt.step();` needs
// nothing in between. A backward through the bare module() is not reduced. It never
// touches the optimizer and never reads the environment.
//
// Errors in a backward (a parameter without a gradient, a failure inside a
// hook on any rank) are thrown out of backward() on every rank at the same
// step, naming the parameters and ranks; see reducer.h.

#include <ATen/core/Tensor.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/worker/process_group.h"

namespace torch::nn {
class Module;
}

namespace ddp::worker {

class Reducer;

struct DDPOptions {
  // Broadcast buffers (e.g. BatchNorm running stats) from rank 0 in
  // prepare_forward()/forward().
  bool broadcast_buffers = true;
  // Bucket size limits in MiB (fractions allowed, as in Python): a bucket is
  // closed once it reaches its limit. Unset: 25, Python's default.
  std::optional<double> bucket_cap_mb;
  // The limit of the first bucket (the last layers, whose gradients are
  // ready first). Unset: on CUDA (NCCL) 1 MiB, Python's default, so that
  // communication starts early; on the CPU (Gloo) the same as bucket_cap_mb,
  // because there every core already computes (one thread per core), so an
  // allreduce running beside backward only takes turns with it and its many
  // small round trips wait for the scheduler: measured slower than sending
  // the gradients after backward (docs/benchmarks.md, worker runtime).
  std::optional<double> first_bucket_mb;
  // Parameters that get no gradient in a synced backward contribute their
  // .grad as it is (what no_sync micro-batches accumulated) or zeros, and
  // keep .grad untouched when no rank used them since the last synced
  // backward. Without it such parameters make backward throw on every rank,
  // naming them and the ranks that missed them.
  bool find_unused_parameters = false;
  // Python's gradient_as_bucket_view, but on by default: each parameter's
  // .grad is an alias of its slice of a bucket (set at the first backward),
  // so gradients are neither copied into the buckets nor back, and there is
  // one copy of them in memory. Off: private buckets, gradients copied in and
  // averages copied back (a .grad tensor the caller keeps a reference to is
  // then updated in place rather than replaced). Optimizer::zero_grad works
  // either way (in place or set_to_none).
  bool gradient_as_bucket_view = true;
  // Record DDPEvents (hook firing, bucket launch, end of backward); tests and
  // benchmarks use them to observe overlap.
  bool record_events = false;
};

struct DDPEvent {
  // GradReady: autograd accumulated a parameter's gradient (hook fired).
  // BucketLaunched: its allreduce was issued. BucketReduced: it finished
  // (recorded from the backend's thread; backends without futures never).
  // BackwardComputed: autograd finished the pass (DDP's end-of-backward
  // callback starts). BackwardFinished: the reduced gradients are in .grad.
  enum class Kind { GradReady, BucketLaunched, BucketReduced, BackwardComputed, BackwardFinished };
  Kind kind;
  size_t index;  // parameter index (GradReady) or bucket index (Bucket*), else 0
  std::chrono::steady_clock::time_point time;
};

// Size of the buckets as built (for tests, logs and the benchmark).
struct BucketInfo {
  std::vector<size_t> parameter_indices;  // into DistributedDataParallel::parameters(), fill order
  size_t numel = 0;
  size_t bytes = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                          std::shared_ptr<ProcessGroup> pg, DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // The wrapped module (Python's ddp_model.module).
  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  template <class M>
  std::shared_ptr<M> module_as() const {
    return std::dynamic_pointer_cast<M>(module_);
  }
  // The module's parameters (what to give the optimizer).
  std::vector<at::Tensor> parameters() const;

  // Call before each forward (forward() does): finishes a backward that threw
  // half-way (releasing the peers), broadcasts buffers from rank 0 when
  // options.broadcast_buffers, and, when grad mode is on, arms the next
  // backward: reduced, or under no_sync() only recorded.
  void prepare_forward();
  // prepare_forward() then module_as<M>()->forward(args...).
  template <class M, class... Args>
  auto forward(Args&&... args) {
    prepare_forward();
    return module_as<M>()->forward(std::forward<Args>(args)...);
  }

  // Forwards taken while the guard lives arm their backward to only
  // accumulate .grad locally; the next backward after a forward outside a
  // guard reduces the accumulated sum. As in Python the decision is taken at
  // forward, not when backward runs.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  bool require_sync() const;

  const std::vector<BucketInfo>& buckets() const;
  // Events recorded since the last clear (options.record_events).
  std::vector<DDPEvent> events() const;
  void clear_events();
  ProcessGroup& process_group() const { return *pg_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  DDPOptions options_;
  std::vector<at::Tensor> buffers_;
  std::atomic<bool> require_sync_{true};
  std::shared_ptr<Reducer> reducer_;
};

// Typed convenience: DDP<Net> ddp(net, pg); ddp.forward(x); ddp.module()->fc1.
template <class M>
class DDP : public DistributedDataParallel {
 public:
  DDP(std::shared_ptr<M> module, std::shared_ptr<ProcessGroup> pg, DDPOptions options = {})
      : DistributedDataParallel(module, std::move(pg), options), typed_(std::move(module)) {}
  const std::shared_ptr<M>& module() const { return typed_; }
  template <class... Args>
  auto forward(Args&&... args) {
    prepare_forward();
    return typed_->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<M> typed_;
};

}  // namespace ddp::worker
