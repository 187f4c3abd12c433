// Shared-memory allreduce for a one-machine Gloo group (see shm_allreduce.h).

#include "shm_allreduce.h"
#include "shm_segment.h"

#include "ddp/common/duration_text.h"
#include "ddp/worker/peer_failure.h"

#include <ATen/Functions.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace ddp::worker {

// ---- LocalWork -------------------------------------------------------------------

void LocalWork::finish(std::exception_ptr e) {
  std::unique_lock<std::mutex> lock(mu);
  error = e;
  // Callbacks added while these run are run too, before `done`.
  while (!on_done.empty()) {
    auto callbacks = std::move(on_done);
    on_done.clear();
    lock.unlock();
    for (auto& f : callbacks) f();
    lock.lock();
  }
  done = true;
  lock.unlock();
  cv.notify_all();
}

void LocalWork::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (error) std::rethrow_exception(error);
}

bool LocalWork::completed() {
  std::lock_guard<std::mutex> lock(mu);
  return done;
}

void LocalWork::on_completion(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!done) {
      on_done.push_back(std::move(f));
      return;
    }
  }
  f();
}

// ---- the segment -----------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kLine = 64;                        // one cache line per rank's flag
constexpr size_t kChunk = size_t{1} << 20;          // bytes per rank per chunk
constexpr int kMaxWorld = 64;

// Line 0 unused; line 1 + r: rank r's flag (the last epoch it arrived at)
// and what it is reducing (numel, dtype), so ranks that call with different
// tensors fail together instead of mixing them.
struct RankLine {
  uint64_t epoch;
  int64_t numel;
  int64_t dtype;
  int64_t areas;   // the shared_buffers segment's number, -1: through the slots
  int64_t offset;  // the tensor's byte offset in this rank's area
};

size_t header_bytes(int world) { return (kLine * (world + 1) + 4095) / 4096 * 4096; }
size_t segment_bytes(int world) { return header_bytes(world) + 2 * static_cast<size_t>(world) * kChunk; }

RankLine* line(void* base, int r) { return reinterpret_cast<RankLine*>(static_cast<char*>(base) + kLine * (r + 1)); }
char* slot(void* base, int world, int set, int r) {
  return static_cast<char*>(base) + header_bytes(world) + (static_cast<size_t>(set) * world + r) * kChunk;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string link_of(const char* path) {
  char buf[256];
  const ssize_t n = ::readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("?");
}

// Same kernel, same pid and mount namespaces: then /dev/shm is shared and
// pids mean the same process.
std::string machine_identity() {
  return read_first_line("/proc/sys/kernel/random/boot_id") + "|" + link_of("/proc/self/ns/pid") + "|" +
         link_of("/proc/self/ns/mnt");
}

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

std::string text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// The last step of a segment's set-up, on every rank: posts whether this
// rank mapped rank 0's segment (`problem` empty) and waits for every rank's
// word. Returns the first failure ("rank R: why"), "" when all mapped it.
std::string agree_on_mapping(c10d::Store& store, const std::string& prefix, int rank, int world,
                             std::chrono::milliseconds timeout, const std::string& problem, const std::string& name) {
  store.set(prefix + "ok/" + std::to_string(rank), bytes(problem.empty() ? "1" : "0 " + problem));
  std::vector<std::string> ok_keys;
  for (int r = 0; r < world; ++r) ok_keys.push_back(prefix + "ok/" + std::to_string(r));
  store.wait(ok_keys, timeout);
  for (int r = 0; r < world; ++r) {
    const std::string ok = text(store.get(ok_keys[r]));
    if (ok != "1") return "rank " + std::to_string(r) + " " + (ok.size() > 2 ? ok.substr(2) : "could not map " + name);
  }
  return "";
}

}  // namespace

std::unique_ptr<ShmAllreduce> ShmAllreduce::negotiate(c10d::Store& store, int rank, int world,
                                                      std::chrono::milliseconds timeout, bool enabled,
                                                      std::string* why) {
  auto off = [&](const std::string& reason) -> std::unique_ptr<ShmAllreduce> {
    if (why) *why = reason;
    return nullptr;
  };
  if (world < 2) return off("a group of one rank");
  if (world > kMaxWorld) return off("more than " + std::to_string(kMaxWorld) + " ranks");

  // 1. Every rank says where it runs. Ranks that are not ours (Python in a
  // mixed group) never do: rank 0 then gives up after a short wait.
  const std::string prefix = "ddp_shm/";
  store.set(prefix + "rank/" + std::to_string(rank),
            bytes(machine_identity() + " " + std::to_string(::getpid()) + " " + (enabled ? "1" : "0")));
  const auto short_wait = std::min(timeout, std::chrono::milliseconds(3000));
  const auto deadline = Clock::now() + short_wait;
  const std::string decision_key = prefix + "decision";
  void* base = nullptr;
  const size_t size = segment_bytes(world);
  std::string name;
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(prefix + "rank/" + std::to_string(r));
    bool all = false;
    while (!(all = store.check(keys)) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::string decision;
    if (!all) {
      decision = "off not every rank runs ddp_worker";
    } else {
      std::string first_id, pids, reason;
      for (int r = 0; r < world && reason.empty(); ++r) {
        std::istringstream in(text(store.get(keys[r])));
        std::string id, pid, on;
        in >> id >> pid >> on;
        if (r == 0) first_id = id;
        if (on != "1") reason = "rank " + std::to_string(r) + " has DDP_SHM_ALLREDUCE=0";
        else if (id != first_id) reason = "rank " + std::to_string(r) + " runs on another machine or namespace";
        pids += " " + pid;
      }
      if (reason.empty()) {
        name = new_shm_segment_name();
        base = create_shm_segment(name, size);
        if (!base)
          reason = "rank 0 could not create a shared-memory segment of " + std::to_string(size) +
                   " bytes in /dev/shm (full or too small?)";
      }
      decision = reason.empty() ? "on " + name + pids : "off " + reason;
    }
    decision = text(store.compareSet(decision_key, {}, bytes(decision)));
    if (base && decision.rfind("on ", 0) != 0) {  // another rank gave up first
      ::munmap(base, size);
      ::shm_unlink(name.c_str());
      base = nullptr;
    }
  } else {
    while (!store.check({decision_key}) && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    store.compareSet(decision_key, {}, bytes("off rank " + std::to_string(rank) + " saw no decision from rank 0"));
  }
  const std::string decision = text(store.get(decision_key));
  if (decision.rfind("on ", 0) != 0) return off(decision.substr(std::min<size_t>(4, decision.size())));

  // 2. Every rank maps rank 0's segment; all must succeed (every rank here
  // runs this code, so the keys come). Whoever can reach the store may have
  // written the decision: rank 0 uses only the segment it made, the others
  // only one that passes open_shm_segment's checks.
  const std::string made = base ? name : "";  // rank 0: the segment it made
  std::istringstream in(decision.substr(3));
  in >> name;
  std::vector<int> pids(static_cast<size_t>(world));
  for (int& p : pids) in >> p;
  std::string problem;
  if (rank == 0) {
    if (name != made) problem = "refused the shared-memory segment " + name + ": rank 0 did not make it";
  } else {
    // The pid rank 0 posted for itself (step 1), which its segment is named after.
    std::string pid0;
    try {
      store.wait({prefix + "rank/0"}, short_wait);
      std::istringstream posted(text(store.get(prefix + "rank/0")));
      std::string id;
      posted >> id >> pid0;
    } catch (const std::exception&) {
    }
    if (pid0 != std::to_string(pids[0])) pid0.clear();  // the decision disagrees with rank 0's own post
    base = open_shm_segment(name, pid0, size, &problem);
  }
  if (!problem.empty() && problem.rfind("refused", 0) == 0)
    std::cerr << "ddp_worker: warning: rank " << rank << " " << problem
              << "; sums stay on Gloo (someone who can reach the store wrote into it? see docs/security.md)"
              << std::endl;
  const std::string failed = agree_on_mapping(store, prefix, rank, world, timeout, problem, name);
  // The name goes once every rank has mapped it; after a failure rank 0
  // removes the segment it made (never one it did not make).
  const bool all_mapped = store.add(prefix + "mapped", 1) == world;
  if (failed.empty() && all_mapped) ::shm_unlink(name.c_str());
  if (!failed.empty()) {
    if (!made.empty()) ::shm_unlink(made.c_str());
    if (base) ::munmap(base, size);
    return off(failed);
  }
  return std::unique_ptr<ShmAllreduce>(new ShmAllreduce(rank, world, timeout, base, size, std::move(pids)));
}

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

size_t ShmAllreduce::segment_size(int world) { return segment_bytes(world); }

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
    used += (static_cast<size_t>(b.numel) * c10::elementSize(b.dtype) + kLine - 1) / kLine * kLine;
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
    store.set(prefix + "name", bytes(base ? name : ""));
  } else {
    store.wait({prefix + "name"}, timeout_);
    name = text(store.get(prefix + "name"));
    if (name.empty()) problem = "saw rank 0 make no segment";
    else base = static_cast<char*>(open_shm_segment(name, std::to_string(pids_[0]), size, &problem));
  }
  if (!problem.empty() && problem.rfind("refused", 0) == 0)
    std::cerr << "ddp_worker: warning: rank " << rank_ << " " << problem
              << "; DDP's buckets stay in private memory (someone who can reach the store wrote into it? see "
                 "docs/security.md)"
              << std::endl;
  const std::string failed = agree_on_mapping(store, prefix, rank_, world_, timeout_, problem, name);
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
  __atomic_store_n(&line(base_, rank_)->epoch, epoch, __ATOMIC_RELEASE);
  const auto start = Clock::now();
  auto next_check = start + std::chrono::milliseconds(5);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    const uint64_t* flag = &line(base_, r)->epoch;
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

namespace {

// Rank r sums share r of a chunk of `count` elements: elements [lo, hi).
std::pair<size_t, size_t> share_of(size_t count, int world, int r) {
  return {count * static_cast<size_t>(r) / static_cast<size_t>(world),
          count * static_cast<size_t>(r + 1) / static_cast<size_t>(world)};
}

// What each rank's value becomes before the sum: itself, or divided by the
// world size (`averaged` elements). The division is a true one, as
// Tensor::div_'s, so the result is the one of every rank dividing its
// values before a plain sum, bit for bit; for a power-of-two world the
// exact reciprocal's product is the same number and cheaper.
struct AsIs {
  template <typename T>
  T operator()(T x) const { return x; }
};
template <typename T>
struct DividedBy {
  T world;
  T operator()(T x) const { return x / world; }
};
template <typename T>
struct TimesExactReciprocal {
  T reciprocal;
  T operator()(T x) const { return x * reciprocal; }
};

// Calls f with the functor that averages a value in a group of `world`.
template <typename T, typename F>
void with_averaging(int world, F&& f) {
  if ((world & (world - 1)) == 0) f(TimesExactReciprocal<T>{T(1) / static_cast<T>(world)});
  else f(DividedBy<T>{static_cast<T>(world)});
}

// dst[j] = src[j] for j in [begin, end), those below `averaged` averaged
// (dst may be src: in place).
template <typename T>
void copy_averaging(T* dst, const T* src, size_t begin, size_t end, size_t averaged, int world) {
  const size_t split = std::clamp(averaged, begin, end);
  if (begin < split)
    with_averaging<T>(world, [&](auto value) {
      for (size_t j = begin; j < split; ++j) dst[j] = value(src[j]);
    });
  if (split < end && dst != src) std::memcpy(dst + split, src + split, (end - split) * sizeof(T));
}

// Before a chunk's first barrier: the shares the peers sum go into this
// rank's slot while its own share stays in the chunk, the first `averaged`
// elements of both averaged on the way (one pass: no division pass before
// the copy).
template <typename T>
void stage_chunk(T* own_slot, T* chunk, size_t count, size_t lo, size_t hi, size_t averaged, int world) {
  copy_averaging(own_slot, chunk, 0, lo, averaged, world);
  copy_averaging(own_slot, chunk, hi, count, averaged, world);
  copy_averaging(chunk, chunk, lo, hi, averaged, world);
}

// This rank's share [lo, hi) of a chunk, summed in rank order (((v0 + v1)
// + v2) + ...; v_q: rank q's values, this rank's own from `data`, the
// others' from their slots). The sum builds up in this rank's slot at the
// share (no peer reads it until the second barrier) and its last step
// writes both the slot, where the peers copy the result from, and `data`.
template <typename T>
void sum_share(void* base, int world, int set, int rank, size_t lo, size_t hi, T* data) {
  auto values = [&](int q) -> const T* {
    return q == rank ? data : reinterpret_cast<const T*>(slot(base, world, set, q));
  };
  T* acc = reinterpret_cast<T*>(slot(base, world, set, rank));
  for (int q = 1; q < world; ++q) {
    const T* a = q == 1 ? values(0) : acc;
    const T* b = values(q);
    if (q + 1 < world) {
      for (size_t j = lo; j < hi; ++j) acc[j] = a[j] + b[j];
    } else {
      for (size_t j = lo; j < hi; ++j) {
        const T s = a[j] + b[j];
        acc[j] = s;
        data[j] = s;
      }
    }
  }
}

// Share [lo, hi) of a shared buffer summed where it lies: rank q's values
// at first + q * stride. Block by block the sum builds up in rank order
// (((v0 + v1) + v2) + ...) in a buffer that stays in L1, then goes to every
// rank's area: each value read once and each sum written once per rank.
template <typename T, typename Value>
void sum_in_areas(char* first, size_t stride, int world, size_t lo, size_t hi, Value value) {
  constexpr size_t kBlock = 2048;
  T sum[kBlock];
  auto of = [&](int q) { return reinterpret_cast<T*>(first + static_cast<size_t>(q) * stride); };
  for (size_t b = lo; b < hi; b += kBlock) {
    const size_t n = std::min(kBlock, hi - b);
    const T* x0 = of(0) + b;
    const T* x1 = of(1) + b;
    for (size_t j = 0; j < n; ++j) sum[j] = value(x0[j]) + value(x1[j]);
    for (int q = 2; q < world; ++q) {
      const T* x = of(q) + b;
      for (size_t j = 0; j < n; ++j) sum[j] += value(x[j]);
    }
    for (int q = 0; q < world; ++q) std::memcpy(of(q) + b, sum, n * sizeof(T));
  }
}

// [lo, hi) with its elements below `averaged` averaged, the rest summed.
template <typename T>
void sum_or_average_in_areas(char* first, size_t stride, int world, size_t lo, size_t hi, size_t averaged) {
  const size_t split = std::clamp(averaged, lo, hi);
  if (lo < split)
    with_averaging<T>(world, [&](auto value) { sum_in_areas<T>(first, stride, world, lo, split, value); });
  if (split < hi) sum_in_areas<T>(first, stride, world, split, hi, AsIs{});
}

}  // namespace

void ShmAllreduce::reduce_in_areas(const at::Tensor& t, const Areas& areas, size_t offset, size_t averaged) {
  RankLine* mine = line(base_, rank_);
  mine->numel = t.numel();
  mine->dtype = static_cast<int64_t>(t.scalar_type());
  mine->areas = areas.id;
  mine->offset = static_cast<int64_t>(offset);
  // Once every rank has arrived their values are final; after the second
  // barrier every share's sum is in every area, and no rank writes into
  // another's area again before the next call's first barrier.
  arrive_and_wait(++epoch_);
  check_same_collective();
  const auto [lo, hi] = share_of(static_cast<size_t>(t.numel()), world_, rank_);
  char* first = areas.base + offset;
  if (t.scalar_type() == at::kFloat) sum_or_average_in_areas<float>(first, areas.stride, world_, lo, hi, averaged);
  else sum_or_average_in_areas<double>(first, areas.stride, world_, lo, hi, averaged);
  arrive_and_wait(++epoch_);
}

void ShmAllreduce::check_same_collective() const {
  const RankLine* mine = line(base_, rank_);
  for (int r = 0; r < world_; ++r) {
    const RankLine* l = line(base_, r);
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
  const size_t per_chunk = kChunk / elem;
  char* data = static_cast<char*>(t.data_ptr());
  RankLine* mine = line(base_, rank_);
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
    char* own_slot = slot(base_, world_, set, rank_);
    // The peers need this rank's values for their shares (and this rank
    // their sums of them, after the second barrier).
    const auto [lo, hi] = share_of(count, world_, rank_);
    const size_t averaged_here = averaged > done ? std::min(averaged - done, count) : 0;
    if (elem == 4)
      stage_chunk(reinterpret_cast<float*>(own_slot), reinterpret_cast<float*>(chunk), count, lo, hi, averaged_here, world_);
    else
      stage_chunk(reinterpret_cast<double*>(own_slot), reinterpret_cast<double*>(chunk), count, lo, hi, averaged_here,
                  world_);
    arrive_and_wait(++epoch_);
    if (first) check_same_collective();
    if (elem == 4) sum_share<float>(base_, world_, set, rank_, lo, hi, reinterpret_cast<float*>(chunk));
    else sum_share<double>(base_, world_, set, rank_, lo, hi, reinterpret_cast<double*>(chunk));
    arrive_and_wait(++epoch_);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      const auto [rlo, rhi] = share_of(count, world_, r);
      std::memcpy(chunk + rlo * elem, slot(base_, world_, set, r) + rlo * elem, (rhi - rlo) * elem);
    }
  }
}

}  // namespace ddp::worker
