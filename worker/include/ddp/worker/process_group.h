#pragma once
// ProcessGroup: the default process group of a training program, created by
// init_process_group() from the torchrun environment (the C++ equivalent of
// torch.distributed.init_process_group("env://")). It owns the rendezvous
// store and the c10d backend (Gloo for CPU, NCCL for CUDA when LibTorch has
// it) and offers blocking and async collectives. It never reads argv or the
// environment after init_process_group has returned, and never retries a
// failed collective: errors are exceptions naming the operation, the rank and
// the timeout. With a heartbeat file (DistEnv::heartbeat_file, from
// DDP_HEARTBEAT_FILE) every collective it issues is recorded in the rank's
// progress heartbeat, with atomic stores only (docs/worker-runtime.md).
//
// Rendezvous matches Python so C++ and Python ranks can share one group:
// TCPStore at MASTER_ADDR:MASTER_PORT (hosted by rank 0 unless
// TORCHELASTIC_USE_AGENT_STORE=True, then wrapped in
// PrefixStore("/worker/attempt_<restart>")), wrapped in
// PrefixStore("default_pg"), the backend, then the same store-based barrier
// and sequence-number exchange Python performs.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/worker/env.h"

namespace ddp::worker {

struct InitOptions {
  // "gloo", "nccl", or "" = the default for the device (nccl on CUDA when
  // built with it, gloo otherwise). When left "", DDP_BACKEND decides if set.
  std::string backend;
  // "cpu", "cuda" (one GPU per rank from LOCAL_RANK) or "auto"/"" (cuda when
  // a GPU is visible and the backend is not gloo). Rules: device_choice.h.
  std::string device;
  // Rendezvous and collective timeout. When left at the default,
  // DDP_TIMEOUT_S (seconds, fractions allowed) decides if set.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};

  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(30)};
};

enum class ReduceOp { Sum, Mean, Max, Min };

class WorkImpl;  // a collective as the runtime issued it: a c10d Work or its own thread's (worker/src/work_impl.h)
class CollectiveRecorder;  // the rank's progress heartbeat (worker/src/heartbeat_recorder.h)

// One async collective in flight. wait() blocks until it finished and throws
// std::runtime_error (naming the operation and rank) when it failed or timed
// out. Destroying an unwaited AsyncWork does not cancel it.
class AsyncWork {
 public:
  AsyncWork() = default;
  // Made by the runtime's collectives (ProcessGroup); `what` and `rank` name
  // the collective in errors.
  AsyncWork(std::shared_ptr<WorkImpl> work, std::string what, int rank);
  void wait();
  bool completed() const;
  // Runs f on the backend's thread when the backend reports the collective
  // finished (Gloo: done; NCCL: queued on its stream); wait() then also waits
  // for f to have run. For timing only: f must be quick and must not throw.
  // A backend without futures never calls f.
  void on_completion(std::function<void()> f);
  bool valid() const { return work_ != nullptr; }
  // Set by ProcessGroup when it issues the collective: wait() and the
  // completion callback record collective `seq` finished in the heartbeat.
  void record_finish(std::shared_ptr<CollectiveRecorder> recorder, std::uint64_t seq);

 private:
  std::shared_ptr<WorkImpl> work_;
  std::string what_;
  int rank_ = -1;
  std::shared_ptr<CollectiveRecorder> recorder_;  // null: no heartbeat
  std::uint64_t seq_ = 0;
};

class ProcessGroup {
 public:
  struct Impl;  // what the group holds (worker/src/process_group_impl.h), made by init_process_group
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;
  int local_world_size() const;
  // Where tensors live: CPU, or with device cuda cuda:LOCAL_RANK (NCCL) or
  // cuda:(LOCAL_RANK % GPUs) (Gloo over CUDA tensors).
  c10::Device device() const;
  const std::string& backend() const;  // "gloo" or "nccl"
  std::chrono::milliseconds timeout() const;
  const DistEnv& env() const;
  // Whether float sums (allreduce, DDP's buckets) go through shared memory
  // rather than Gloo's loopback TCP: a CPU Gloo group whose ranks all run on
  // this machine (see worker/src/shm_allreduce.h). When not, why not.
  bool shared_memory_allreduce() const;
  const std::string& shared_memory_off_reason() const;
  // Whether sums of `dtype` go through shared memory in this group:
  // shared_memory_allreduce() and a dtype summed there (float32, float64).
  bool shared_memory_sums(at::ScalarType dtype) const;
  // With shared_memory_allreduce: zeroed CPU tensors of these sizes and
  // dtypes that allreduce sums in place in shared memory, without copying
  // them in and out (DDP's buckets). Collective when shared memory is on:
  // every rank calls it at the same point with the same sizes. Empty (on
  // every rank; `why` says why) when off, for a dtype other than float32 or
  // float64, or when world x their bytes would take more than half of
  // /dev/shm's free space.
  std::vector<at::Tensor> shared_buffers(const std::vector<std::pair<int64_t, at::ScalarType>>& sizes,
                                         std::string* why = nullptr);

  // Blocking collectives; tensors must be dense and on device() (Gloo also
  // takes CPU tensors only). Mean is Sum followed by a division, because
  // Gloo has no AVG.
  void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  void broadcast(at::Tensor& tensor, int root = 0);
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor);
  void barrier();

  // Async variants (Sum only for allreduce); used by DDP's buckets. The
  // first `averaged` elements of the allreduce are averaged instead: every
  // rank's values divided by the world size, then summed, bit for bit what
  // dividing the tensor before the sum gives (DDP's gradients, before the
  // summed status tail). Through shared memory the division is part of a
  // pass the sum makes anyway (over a shared buffer, or into the slots).
  AsyncWork allreduce_async(at::Tensor& tensor, int64_t averaged = 0);
  AsyncWork broadcast_async(at::Tensor& tensor, int root = 0);
  // Async Sum of a small CPU tensor among the ranks, without touching the
  // GPU: on Gloo the group itself; on NCCL a Gloo group beside it, created by
  // the first call (a collective: every rank must make its first call at the
  // same point, as DDP's end of backward does). DDP exchanges its per-step
  // status with it, so that deciding a step never waits for the device.
  AsyncWork host_allreduce_async(at::Tensor& cpu_tensor);

 private:
  // The runtime's own free functions that need the c10d objects
  // (native_backend, native_store, training_step) go through
  // ProcessGroupAccess (worker/src/process_group_impl.h); users reach them
  // through process_group_native.h only.
  friend struct ProcessGroupAccess;
  std::unique_ptr<Impl> impl_;
};

// Reads the environment (DistEnv::from_environment(argc, argv)), rendezvous,
// creates the backend. Throws std::invalid_argument for a bad environment or
// option, std::runtime_error when the store cannot be reached or the ranks
// do not all join within the timeout (the message names host:port, the
// timeout and how many ranks joined).
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {},
                                                 int argc = 0, char** argv = nullptr);

// The same from an explicit environment (tests, custom launchers).
std::shared_ptr<ProcessGroup> init_process_group(const DistEnv& env,
                                                 const InitOptions& options);

// The timeout init_process_group uses: options.timeout, or DDP_TIMEOUT_S
// when that is left at the default. Throws std::invalid_argument, naming the
// value and the range, outside 0.001 s to 2147483 s (24.8 days).
std::chrono::milliseconds resolve_timeout(const InitOptions& options);

}  // namespace ddp::worker
