// The shared-memory allreduce of a one-machine Gloo group (see
// shm_allreduce.h): the object, its queue thread and barrier, the shared
// buffers, and the two ways a sum runs (through the slots, in the areas).
// Its negotiation is shm_negotiation.cpp, the segment's layout shm_layout.h,
// the loops shm_sum_kernels.h.

#include "shm_allreduce.h"
#include "shm_layout.h"
#include "shm_negotiation.h"
#include "shm_segment.h"
#include "shm_sum_kernels.h"

#include "ddp/common/duration_text.h"
#include "ddp/worker/peer_failure.h"

#include <ATen/Functions.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <sched.h>
#include <sys/mman.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <utility>

namespace ddp::worker {

namespace {

using Clock = std::chrono::steady_clock;

// False once process `pid` has exited (gone, or a zombie not yet reaped).
bool alive(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all;
  if (!std::getline(in, all)) return false;
  const auto close = all.rfind(')');
  if (close == std::string::npos || close + 2 >= all.size()) return false;
  const char state = all[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

ShmAllreduce::ShmAllreduce(int rank, int world, std::chrono::milliseconds timeout, void* base, size_t bytes,
                           std::vector<int> pids)
    : rank_(rank), world_(world), timeout_(timeout), base_(base), bytes_(bytes), pids_(std::move(pids)) {
  thread_ = std::thread([this] { run(); });
}

ShmAllreduce::~ShmAllreduce() {
  {
    // Set under the lock the worker thread's wait holds while it checks its
    // predicate: set without it, a thread between that check and blocking
    // would miss this wakeup and join() would wait forever.
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::munmap(base_, bytes_);
}

size_t ShmAllreduce::segment_size(int world) { return shm::segment_bytes(world); }

// ---- shared buffers --------------------------------------------------------------

// sum_share and sum_in_areas are written for float and double.
bool ShmAllreduce::sums(at::ScalarType t) { return t == at::kFloat || t == at::kDouble; }

struct ShmAllreduce::Areas {
  Areas(int64_t id, char* base, size_t stride, size_t used, size_t bytes)
      : id(id), base(base), stride(stride), used(used), bytes(bytes) {}
  ~Areas() { ::munmap(base, bytes); }
  Areas(const Areas&) = delete;
  Areas& operator=(const Areas&) = delete;
  const int64_t id;     // which shared_buffers call made it (the same on every rank)
  char* const base;     // rank q's area starts at base + q * stride
  const size_t stride;  // whole pages
  const size_t used;    // bytes of an area that hold tensors
  const size_t bytes;   // the mapping
};

std::vector<at::Tensor> ShmAllreduce::shared_buffers(c10d::Store& store, const std::vector<BufferSpec>& specs,
                                                     std::string* why) {
  auto none = [&](const std::string& reason) {
    if (why) *why = reason;
    return std::vector<at::Tensor>{};
  };
  std::vector<size_t> offsets;
  size_t used = 0;
  for (const auto& b : specs) {
    if (!sums(b.dtype))  // the same answer on every rank: they pass the same specs
      return none(std::string("a buffer of ") + c10::toString(b.dtype) + " (only float32 and float64 are summed here)");
    offsets.push_back(used);
    used += (static_cast<size_t>(b.numel) * c10::elementSize(b.dtype) + shm::kLine - 1) / shm::kLine * shm::kLine;
  }
  if (used == 0) return none("no buffer to share");
  const size_t stride = (used + 4095) / 4096 * 4096, size = stride * static_cast<size_t>(world_);
  const int64_t id = buffer_calls_++;
  const std::string prefix = "ddp_shm/buffers/" + std::to_string(id) + "/";

  // Rank 0 makes the segment and names it (or says why not); the others map
  // it after open_shm_segment's checks; all agree, as in negotiate.
  std::string name, problem;
  char* base = nullptr;
  if (rank_ == 0) {
    // /dev/shm is shared with every other program on the machine (and a
    // container's is small): the buckets take at most half of what is free.
    struct statvfs fs {};
    const size_t free_bytes = ::statvfs("/dev/shm", &fs) == 0 ? fs.f_bavail * fs.f_frsize : 0;
    if (size > free_bytes / 2) {
      problem = "would take " + std::to_string(size) + " of the " + std::to_string(free_bytes) +
                " bytes free in /dev/shm (at most half)";
    } else {
      name = new_shm_segment_name();
      base = static_cast<char*>(create_shm_segment(name, size));
      if (!base) problem = "could not create a shared-memory segment of " + std::to_string(size) + " bytes in /dev/shm";
    }
    store.set(prefix + "name", shm::bytes(base ? name : ""));
  } else {
    store.wait({prefix + "name"}, timeout_);
    name = shm::text(store.get(prefix + "name"));
    if (name.empty()) problem = "saw rank 0 make no segment";
    else base = static_cast<char*>(open_shm_segment(name, std::to_string(pids_[0]), size, &problem));
  }
  if (!problem.empty() && problem.rfind("refused", 0) == 0)
    std::cerr << "ddp_worker: warning: rank " << rank_ << " " << problem
              << "; DDP's buckets stay in private memory (someone who can reach the store wrote into it? see "
                 "docs/security.md)"
              << std::endl;
  const std::string failed = shm::agree_on_mapping(store, prefix, rank_, world_, timeout_, problem, name);
  if (rank_ == 0 && base) ::shm_unlink(name.c_str());  // every rank has mapped it, or given up
  if (!failed.empty()) {
    if (base) ::munmap(base, size);
    return none(failed + " (" + std::to_string(world_) + " ranks x " + std::to_string(stride) + " bytes)");
  }
  auto areas = std::make_shared<Areas>(id, base, stride, used, size);
  {
    std::lock_guard<std::mutex> lock(mu_);
    areas_.erase(std::remove_if(areas_.begin(), areas_.end(), [](const auto& w) { return w.expired(); }),
                 areas_.end());
    areas_.push_back(areas);
  }
  std::vector<at::Tensor> out;
  char* own = base + static_cast<size_t>(rank_) * stride;
  for (size_t i = 0; i < specs.size(); ++i)
    out.push_back(at::from_blob(own + offsets[i], {specs[i].numel}, [areas](void*) {},
                                at::TensorOptions().dtype(specs[i].dtype)));
  return out;
}

std::shared_ptr<ShmAllreduce::Areas> ShmAllreduce::areas_of(const at::Tensor& t, size_t* offset) const {
  const char* p = static_cast<const char*>(t.data_ptr());
  const size_t n = t.numel() * t.element_size();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& w : areas_) {
    auto a = w.lock();
    if (!a) continue;
    const char* own = a->base + static_cast<size_t>(rank_) * a->stride;
    if (p >= own && p + n <= own + a->used) {
      *offset = static_cast<size_t>(p - own);
      return a;
    }
  }
  return nullptr;
}

bool ShmAllreduce::serves(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided && t.is_contiguous() &&
         sums(t.scalar_type()) && t.numel() > 0;
}

std::shared_ptr<LocalWork> ShmAllreduce::allreduce_async(const at::Tensor& t, size_t averaged) {
  auto work = std::make_shared<LocalWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({t, averaged, work});
    last_ = work;
  }
  cv_.notify_one();
  return work;
}

std::shared_ptr<LocalWork> ShmAllreduce::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

void ShmAllreduce::run() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      if (broken_)
        throw std::runtime_error("an earlier shared-memory allreduce of this group failed, so the ranks are out of step");
      reduce(job.tensor, job.averaged);
    } catch (...) {
      broken_ = true;
      error = std::current_exception();
    }
    job.tensor = at::Tensor();
    job.work->finish(error);
  }
}

void ShmAllreduce::check_peers(const char* during) const {
  for (int r = 0; r < world_; ++r)
    if (r != rank_ && !alive(pids_[static_cast<size_t>(r)]))
      // A PeerFailure: this rank fails because rank r died, and must not be
      // named the root cause (its error file may be written before r is reaped).
      throw PeerFailure(r, "rank " + std::to_string(r) + " (pid " + std::to_string(pids_[static_cast<size_t>(r)]) +
                               ") exited during a shared-memory allreduce (" + during + ")");
}

// Publishes this rank's arrival at `epoch` and waits for every rank's. Spins
// briefly (the peers are usually there within microseconds), then yields,
// then sleeps in short steps; checks the peers, the timeout and shutdown.
void ShmAllreduce::arrive_and_wait(uint64_t epoch) {
  __atomic_store_n(&shm::rank_line(base_, rank_)->epoch, epoch, __ATOMIC_RELEASE);
  const auto start = Clock::now();
  auto next_check = start + std::chrono::milliseconds(5);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const uint64_t* flag = &shm::rank_line(base_, r)->epoch;
    for (unsigned spins = 0; __atomic_load_n(flag, __ATOMIC_ACQUIRE) < epoch; ++spins) {
      if (spins < 4000) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      const auto now = Clock::now();
      if (now - start < std::chrono::microseconds(500)) {
        ::sched_yield();
        continue;
      }
      if (now >= next_check) {
        if (stop_) throw std::runtime_error("the process group was destroyed during a shared-memory allreduce");
        check_peers("waiting for the ranks to arrive");
        if (now - start > timeout_)
          throw std::runtime_error("timed out after " + ddp::seconds_text(timeout_) + " waiting for rank " +
                                   std::to_string(r) + " in a shared-memory allreduce");
        next_check = now + std::chrono::milliseconds(5);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void ShmAllreduce::reduce_in_areas(const at::Tensor& t, const Areas& areas, size_t offset, size_t averaged) {
  shm::RankLine* mine = shm::rank_line(base_, rank_);
  mine->numel = t.numel();
  mine->dtype = static_cast<int64_t>(t.scalar_type());
  mine->areas = areas.id;
  mine->offset = static_cast<int64_t>(offset);
  // Once every rank has arrived their values are final; after the second
  // barrier every share's sum is in every area, and no rank writes into
  // another's area again before the next call's first barrier.
  arrive_and_wait(++epoch_);
  check_same_collective();
  const auto [lo, hi] = shm::share_of(static_cast<size_t>(t.numel()), world_, rank_);
  char* first = areas.base + offset;
  if (t.scalar_type() == at::kFloat) shm::sum_or_average_in_areas<float>(first, areas.stride, world_, lo, hi, averaged);
  else shm::sum_or_average_in_areas<double>(first, areas.stride, world_, lo, hi, averaged);
  arrive_and_wait(++epoch_);
}

void ShmAllreduce::check_same_collective() const {
  const shm::RankLine* mine = shm::rank_line(base_, rank_);
  for (int r = 0; r < world_; ++r) {
    const shm::RankLine* l = shm::rank_line(base_, r);
    if (l->numel != mine->numel || l->dtype != mine->dtype)
      throw std::runtime_error("rank " + std::to_string(r) + " reduces " + std::to_string(l->numel) +
                               " elements of another type or count than this rank's " + std::to_string(mine->numel) +
                               " (the ranks called different collectives)");
    if (l->areas != mine->areas || l->offset != mine->offset)
      throw std::runtime_error("rank " + std::to_string(r) + " reduces another tensor than this rank (" +
                               (l->areas < 0 ? "a private one" : "shared buffer set " + std::to_string(l->areas)) +
                               " against " +
                               (mine->areas < 0 ? "a private one" : "shared buffer set " + std::to_string(mine->areas)) +
                               ", byte offset " + std::to_string(l->offset) + " against " +
                               std::to_string(mine->offset) + "; the ranks called different collectives)");
  }
}

void ShmAllreduce::reduce(const at::Tensor& t, size_t averaged) {
  size_t offset = 0;
  if (auto areas = areas_of(t, &offset)) return reduce_in_areas(t, *areas, offset, averaged);
  const size_t elem = t.element_size();
  const size_t total = static_cast<size_t>(t.numel());
  const size_t per_chunk = shm::kChunk / elem;
  char* data = static_cast<char*>(t.data_ptr());
  shm::RankLine* mine = shm::rank_line(base_, rank_);
  mine->numel = t.numel();
  mine->dtype = static_cast<int64_t>(t.scalar_type());
  mine->areas = -1;
  mine->offset = -1;
  for (size_t done = 0; done < total; done += per_chunk) {
    const size_t count = std::min(per_chunk, total - done);
    // The two slot sets alternate over every chunk of every call: a rank
    // that runs ahead writes the set no rank can still be reading (the
    // first barrier of the chunk before made sure all finished with it).
    const int set = static_cast<int>(chunks_++ % 2);
    const bool first = done == 0;
    char* chunk = data + done * elem;
    char* own_slot = shm::slot(base_, world_, set, rank_);
    // The peers need this rank's values for their shares (and this rank
    // their sums of them, after the second barrier).
    const auto [lo, hi] = shm::share_of(count, world_, rank_);
    const size_t averaged_here = averaged > done ? std::min(averaged - done, count) : 0;
    if (elem == 4)
      shm::stage_chunk(reinterpret_cast<float*>(own_slot), reinterpret_cast<float*>(chunk), count, lo, hi, averaged_here, world_);
    else
      shm::stage_chunk(reinterpret_cast<double*>(own_slot), reinterpret_cast<double*>(chunk), count, lo, hi, averaged_here,
                  world_);
    arrive_and_wait(++epoch_);
    if (first) check_same_collective();
    if (elem == 4) shm::sum_share<float>(base_, world_, set, rank_, lo, hi, reinterpret_cast<float*>(chunk));
    else shm::sum_share<double>(base_, world_, set, rank_, lo, hi, reinterpret_cast<double*>(chunk));
    arrive_and_wait(++epoch_);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const auto [rlo, rhi] = shm::share_of(count, world_, r);
      std::memcpy(chunk + rlo * elem, shm::slot(base_, world_, set, r) + rlo * elem, (rhi - rlo) * elem);
    }
  }
}

}  // namespace ddp::worker
