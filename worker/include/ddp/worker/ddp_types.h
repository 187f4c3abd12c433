#pragma once
// The plain types of DistributedDataParallel (ddp.h) that its Reducer
// (reducer.h) shares: the options, the recorded events and the buckets' sizes.
// Values only, no behaviour; ddp.h includes this header, so a program that
// includes ddp.h sees them as before.

#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

namespace ddp::worker {

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

}  // namespace ddp::worker
