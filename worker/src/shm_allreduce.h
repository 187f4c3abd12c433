#pragma once
// Allreduce (sum) through shared memory, for a Gloo group whose ranks all run
// on this machine (the usual single-node job). Gloo has no shared-memory
// transport: on one host it moves every byte through loopback TCP, with a
// socket thread per process, and on a 2-core machine an allreduce of 1-4 MiB
// often stalls for ~3 ms waiting for a CPU (docs/worker-runtime.md). Here
// every rank maps one segment with a slot per rank. Each chunk of the tensor
// is cut into one share per rank; rank r copies the other ranks' shares into
// its slot, sums share r (its own values from the tensor, the others' from
// their slots) into the tensor and into its slot, then copies the other
// shares' sums from their ranks' slots: two barriers per chunk, no thread in
// between, and with 2 ranks each rank moves 4 bytes per byte of the tensor
// (copying the whole chunk in and its whole sum out moved 5.5). Tensors made
// by shared_buffers (DDP's buckets) need no slots: every rank's copy lies in
// a segment all ranks map, so rank r sums share r straight from every rank's
// copy and writes the sum into each (2 bytes moved per byte with 2 ranks).
//
// Sums run in rank order (((r0 + r1) + r2) + ...), the same on every rank,
// so results are identical across ranks; with 2 ranks they are bit-for-bit
// Gloo's (addition of two values commutes). Only float32 and float64 sums of
// contiguous CPU tensors take this path; everything else stays on Gloo.
//
// Set up collectively by ShmAllreduce::negotiate after the Gloo group is up:
// on only when every rank of the group runs this code on the same kernel
// (boot id) in the same pid and mount namespaces and maps the segment rank 0
// made; otherwise every rank agrees on Gloo. DDP_SHM_ALLREDUCE=0 (false, no, off) turns it off.
// The store is open to whoever reaches its port, so the segment name read
// from it is not trusted: rank 0 uses only the segment it made, the others
// only /ddp-shm-<rank 0's pid>-<n> that fstat shows is a regular file of
// this user, mode 0600, of the expected size; a refusal is a warning on
// stderr and Gloo for the whole group (docs/security.md).
//
// Never a hang: a wait ends with an error when a peer process has exited
// (same pid namespace, so its /proc entry tells), at the group's timeout,
// or when the group is destroyed.
//
// Files: this object, its queue thread, barrier and shared buffers
// (shm_allreduce.cpp); negotiate (shm_negotiation.cpp); the segment's layout
// (shm_layout.h); the sum loops (shm_sum_kernels.h); the segments themselves
// (shm_segment.h); the work it hands out (local_work.h).

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "local_work.h"

namespace c10d {
class Store;
}

namespace ddp::worker {

class ShmAllreduce {
 public:
  // Collective over every rank of the group (all must call it at the same
  // point). Returns null when shared memory cannot serve this group; `why`
  // then says why (for logs and tests). `enabled`: this rank's
  // DDP_SHM_ALLREDUCE (read by init_process_group); off on any rank is off.
  static std::unique_ptr<ShmAllreduce> negotiate(c10d::Store& store, int rank, int world,
                                                 std::chrono::milliseconds timeout, bool enabled,
                                                 std::string* why = nullptr);
  // The call without `enabled` would turn `why` into it (a pointer is a bool).
  static std::unique_ptr<ShmAllreduce> negotiate(c10d::Store&, int, int, std::chrono::milliseconds,
                                                 std::string*) = delete;
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // The segment's size for a group of `world` ranks.
  static size_t segment_size(int world);

  // The dtypes summed here: float32 and float64.
  static bool sums(at::ScalarType dtype);
  // Whether this tensor takes the shared-memory path (dtype and layout; the
  // same answer on every rank for the same call).
  static bool serves(const at::Tensor& t);

  // Tensors the ranks sum in place in shared memory, without the copies
  // through the slots (DDP's buckets). Collective: every rank calls it at
  // the same point with the same specs. Rank 0 makes one segment with an
  // area per rank, each holding the tensors at the same offsets, and every
  // rank maps all the areas. Returns this rank's tensors (zeros), or none on
  // every rank, with `why` set, when the segment would take more than half
  // of /dev/shm's free space or some rank cannot make or map it. The memory
  // stays mapped while a tensor on it lives.
  struct BufferSpec {
    int64_t numel;
    at::ScalarType dtype;
  };
  std::vector<at::Tensor> shared_buffers(c10d::Store& store, const std::vector<BufferSpec>& specs,
                                         std::string* why);

  // Queues an in-place sum of `t` over the ranks; collectives run one at a
  // time in the order queued, on this object's thread. A tensor of
  // shared_buffers (the same one on every rank) is summed where it is: rank
  // r sums share r of it from every rank's area, in rank order, and writes
  // the sum into every area (with 2 ranks 2 bytes moved per byte, not 4).
  // The first `averaged` elements are averaged instead: each rank's values
  // divided by the world size, then summed (DDP's gradients; the same bits
  // as dividing before a plain sum): in the sum's own pass for a shared
  // buffer, in the copy into the slots otherwise, never a pass of its own.
  std::shared_ptr<LocalWork> allreduce_async(const at::Tensor& t, size_t averaged = 0);
  // The last collective queued (null when none): barrier() waits for it.
  std::shared_ptr<LocalWork> last() const;

 private:
  struct Job {
    at::Tensor tensor;
    size_t averaged = 0;
    std::shared_ptr<LocalWork> work;
  };
  struct Areas;  // one segment of shared_buffers
  ShmAllreduce(int rank, int world, std::chrono::milliseconds timeout, void* base, size_t bytes,
               std::vector<int> pids);
  void run();
  void reduce(const at::Tensor& t, size_t averaged);
  // The areas holding `t` in this rank's area (null: none), and its offset there.
  std::shared_ptr<Areas> areas_of(const at::Tensor& t, size_t* offset) const;
  void reduce_in_areas(const at::Tensor& t, const Areas& areas, size_t offset, size_t averaged);
  // After the first barrier: every rank reduces what this one does.
  void check_same_collective() const;
  void arrive_and_wait(uint64_t epoch);
  void check_peers(const char* during) const;

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  void* base_;
  size_t bytes_;
  std::vector<int> pids_;  // each rank's pid, to tell a peer that exited
  uint64_t epoch_ = 0;
  uint64_t chunks_ = 0;  // chunks reduced so far (which slot set is next)

  int buffer_calls_ = 0;                     // shared_buffers calls (store keys)
  std::vector<std::weak_ptr<Areas>> areas_;  // under mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  std::shared_ptr<LocalWork> last_;
  std::atomic<bool> stop_{false};
  bool broken_ = false;  // a collective failed: the ranks are out of step
  std::thread thread_;
};

}  // namespace ddp::worker
