#pragma once
// Reducer: the gradient synchronisation of one DistributedDataParallel. It
// owns the flat gradient buckets, the map of parameters used since the last
// synced backward, and the post-hooks it registers on the parameters'
// gradient accumulators (each hook holds a weak_ptr, so a destroyed Reducer
// leaves no-op hooks behind). DistributedDataParallel creates it once and
// arms it before each forward; it never touches the optimizer, the module's
// buffers or the environment.
//
// Arming (prepare_forward, like Python's prepare_for_backward): only a
// backward after a forward through DDP with grad mode on does anything. Armed
// for sync, it is reduced; armed under no_sync, it only records which
// parameters got a gradient (the usage map lives until the next synced
// backward, so a parameter used in any micro-batch counts as used). A
// backward through the bare module is purely local.
//
// Gradients as bucket views (gradient_as_bucket_view, the default): each
// parameter's .grad becomes an alias of its slice of a flat bucket (sharing
// storage through set_, not an autograd view, so optimizers may detach_ and
// zero_ it in place). Autograd then accumulates straight into the bucket and
// the optimizer steps on the bucket's memory: no copy in, no copy out. A
// .grad that is not the alias (the first backward, or after zero_grad with
// set_to_none) is copied in once and replaced by the alias. Without the
// option the buckets are private: gradients are copied in and the averages
// copied back into .grad.
//
// One synced backward, the same steps on every rank so that collectives are
// always issued in the same order:
//   1. Each hook makes sure its gradient is in its bucket slice; a complete
//      bucket starts its async allreduce, which averages the gradients
//      (each rank's divided by world_size, then summed: through shared
//      memory in the sum's own pass), while backward continues, buckets
//      strictly in index order.
//   2. At the end of backward (an engine callback), or at once when a hook
//      throws, every bucket not launched yet is filled (a parameter without
//      a fresh gradient contributes its .grad, or zeros) and launched. With
//      them goes a small status, summed over the ranks: per parameter how
//      many ranks missed its gradient (or, with find_unused_parameters, used
//      it), per rank whether it failed and how many parameters it missed.
//      On the CPU (Gloo) with a float32/float64 last bucket the status is
//      that bucket's tail (written just before it is launched, unscaled):
//      no collective of its own, whose latency every step would pay at its
//      end. Otherwise (NCCL, other dtypes) it is a separate allreduce on the
//      host (ProcessGroup::host_allreduce_async), after the buckets. The last
//      bucket launched from a hook means every gradient arrived and no hook
//      failed, so its status is complete then; a backward that throws after
//      that was reduced all the same, and the next prepare_forward only
//      waits for it.
//   3. Every rank waits for all of it and takes the same decision from the
//      status: the averages are in .grad (views) or are written into it
//      (private buckets), or every rank throws, naming the parameters and the
//      ranks. A rank that skips a parameter or fails inside a hook therefore
//      costs its peers only the time until it ends its backward (never the
//      collective timeout), and ranks that catch the exception are still in
//      step for the next iteration (after zeroing their gradients: with views
//      .grad then holds partial sums, not local gradients).
// A backward that throws elsewhere after the hooks started never reaches
// step 2; the next prepare_forward() finishes it as failed, releasing the
// peers (who then throw) before any new collective is issued.

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/worker/bucket_assignment.h"
#include "ddp/worker/ddp_types.h"
#include "ddp/worker/process_group.h"

namespace torch::autograd {
struct Node;
}

namespace ddp::worker {

struct ReducerOptions {
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = true;
  bool record_events = false;
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // params / names: every parameter of the module, in parameters() order;
  // buckets: compute_bucket_assignment over them (indices into params).
  // Registers the hooks on the parameters that appear in a bucket.
  static std::shared_ptr<Reducer> create(std::shared_ptr<ProcessGroup> pg, std::vector<at::Tensor> params,
                                         std::vector<std::string> names, const std::vector<AssignedBucket>& buckets,
                                         ReducerOptions options);
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each forward: finishes a backward abandoned half-way (see above),
  // then, when grad mode is on, arms the next backward to be reduced (sync)
  // or only recorded (!sync, no_sync).
  void prepare_forward(bool sync);

  const std::vector<BucketInfo>& bucket_info() const { return info_; }
  std::vector<DDPEvent> events() const;
  void clear_events();

  // Called by the hook of parameter k, after autograd accumulated its .grad.
  void on_grad_ready(size_t k);

 private:
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offset;  // element offset of each in `flat`
    int64_t grad_numel = 0;       // gradients in `flat`; the last bucket may have the status after them
    at::Tensor flat;
    std::vector<at::Tensor> views;  // per parameter: its slice, shaped like it (aliases, see above)
    size_t pending = 0;  // gradients not yet copied in this backward
    bool launched = false;
    AsyncWork work;
  };
  enum class Mode { Off, Accumulate, Sync };
  static constexpr size_t kNoBucket = static_cast<size_t>(-1);

  Reducer(std::shared_ptr<ProcessGroup> pg, std::vector<at::Tensor> params, std::vector<std::string> names,
          const std::vector<AssignedBucket>& buckets, ReducerOptions options);
  void install_hooks();
  // Every bucket's memory, zeroed (elements, dtype each): shared memory the
  // ranks sum in place, or private memory (rank 0 says why when that costs
  // copies: the sums would have gone through shared memory).
  std::vector<at::Tensor> bucket_memory(const std::vector<std::pair<int64_t, at::ScalarType>>& sizes) const;

  // The only places that move data between .grad and the buckets.
  const at::Tensor& bucket_view(size_t k) const;
  bool grad_is_view(size_t k) const;
  void copy_grad_in(size_t k);
  void copy_result_out(size_t k);
  std::string grad_state_after_error() const;

  void record(DDPEvent::Kind kind, size_t index);
  void start_backward();
  void mark_ready(size_t k);
  void launch_ready_buckets();
  void finalize();
  // Steps 2 and 3 of the protocol; failed_here: this rank gives up on this
  // backward (a hook threw, or it was abandoned). Throws on every rank when
  // the step cannot be reduced. Leaves the Reducer disarmed.
  void finish(bool failed_here, std::string local_error);
  void decide(bool failed_here, std::string local_error);  // finish() less the disarm
  // This rank's status of the current backward (see above), from missing_,
  // failed_here_ and used_; P + 2 * world values.
  std::vector<int64_t> local_status() const;
  void write_status_tail();
  void disarm();
  void abandon(const std::string& why) noexcept;
  std::string error_prefix() const;

  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions opt_;
  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<size_t> bucket_of_;  // kNoBucket: frozen (requires_grad false)
  std::vector<size_t> pos_in_bucket_;
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> info_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks alive

  mutable std::mutex mu_;
  Mode mode_ = Mode::Off;
  bool in_backward_ = false;
  size_t next_bucket_ = 0;  // first bucket not launched yet
  std::vector<char> ready_;  // gradient copied in during this backward
  std::vector<char> missing_;  // no gradient in this backward (found at its end)
  int64_t missing_count_ = 0;
  bool failed_here_ = false;   // this rank gave up on this backward
  size_t status_in_bucket_ = 0;  // > 0: status length, carried by the last bucket's tail
  std::vector<char> used_;   // got a defined gradient since the last synced backward

  mutable std::mutex events_mu_;  // not mu_: completion callbacks record from the backend's thread
  std::vector<DDPEvent> events_;
};

}  // namespace ddp::worker
