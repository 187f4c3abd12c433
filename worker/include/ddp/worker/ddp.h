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

#include "ddp/worker/ddp_types.h"
#include "ddp/worker/process_group.h"

namespace torch::nn {
class Module;
}

namespace ddp::worker {

class Reducer;

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
