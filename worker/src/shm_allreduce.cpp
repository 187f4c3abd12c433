// Shared-memory allreduce for a one-machine Gloo group (see shm_allreduce.h).

#include "shm_allreduce.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

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

void* map_segment(const std::string& name, size_t size, bool create) {
  const int fd = create ? ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)
                        : ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  // posix_fallocate, not ftruncate: the pages are reserved now, so a small
  // /dev/shm (a container's 64 MiB) fails here instead of SIGBUS later.
  if (create && ::posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != size) {
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : p;
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
        std::random_device rd;
        name = "/ddp-shm-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
        base = map_segment(name, size, /*create=*/true);
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
  // runs this code, so the keys come).
  std::istringstream in(decision.substr(3));
  in >> name;
  std::vector<int> pids(static_cast<size_t>(world));
  for (int& p : pids) in >> p;
  if (rank != 0) base = map_segment(name, size, /*create=*/false);
  store.set(prefix + "ok/" + std::to_string(rank), bytes(base ? "1" : "0"));
  std::vector<std::string> ok_keys;
  for (int r = 0; r < world; ++r) ok_keys.push_back(prefix + "ok/" + std::to_string(r));
  store.wait(ok_keys, timeout);
  std::string failed;
  for (int r = 0; r < world && failed.empty(); ++r)
    if (text(store.get(ok_keys[r])) != "1") failed = "rank " + std::to_string(r) + " could not map " + name;
  if (store.add(prefix + "mapped", 1) == world || !failed.empty()) ::shm_unlink(name.c_str());
  if (!failed.empty()) {
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
  stop_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::munmap(base_, bytes_);
}

bool ShmAllreduce::serves(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble) && t.numel() > 0;
}

std::shared_ptr<LocalWork> ShmAllreduce::allreduce_async(const at::Tensor& t) {
  auto work = std::make_shared<LocalWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({t, work});
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
      reduce(job.tensor);
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
      throw std::runtime_error("rank " + std::to_string(r) + " (pid " + std::to_string(pids_[static_cast<size_t>(r)]) +
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
          throw std::runtime_error("timed out after " + std::to_string(timeout_.count()) +
                                   " ms waiting for rank " + std::to_string(r) + " in a shared-memory allreduce");
        next_check = now + std::chrono::milliseconds(5);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

template <typename T>
void sum_share(void* base, int world, int set, int rank, size_t count) {
  const size_t lo = count * rank / world, hi = count * (rank + 1) / world;
  T* out = reinterpret_cast<T*>(slot(base, world, set, 0));
  for (int r = 1; r < world; ++r) {
    const T* in = reinterpret_cast<const T*>(slot(base, world, set, r));
    for (size_t j = lo; j < hi; ++j) out[j] += in[j];
  }
}

void ShmAllreduce::reduce(const at::Tensor& t) {
  const size_t elem = t.element_size();
  const size_t total = static_cast<size_t>(t.numel());
  const size_t per_chunk = kChunk / elem;
  char* data = static_cast<char*>(t.data_ptr());
  RankLine* mine = line(base_, rank_);
  mine->numel = t.numel();
  mine->dtype = static_cast<int64_t>(t.scalar_type());
  for (size_t done = 0; done < total; done += per_chunk) {
    const size_t count = std::min(per_chunk, total - done);
    // The two slot sets alternate over every chunk of every call: a rank
    // that runs ahead writes the set no rank can still be reading (the
    // first barrier of the chunk before made sure all finished with it).
    const int set = static_cast<int>(chunks_++ % 2);
    const bool first = done == 0;
    std::memcpy(slot(base_, world_, set, rank_), data + done * elem, count * elem);
    arrive_and_wait(++epoch_);
    if (first) {
      for (int r = 0; r < world_; ++r) {
        const RankLine* l = line(base_, r);
        if (l->numel != mine->numel || l->dtype != mine->dtype)
          throw std::runtime_error("rank " + std::to_string(r) + " reduces " + std::to_string(l->numel) +
                                   " elements of another type or count than this rank's " +
                                   std::to_string(mine->numel) + " (the ranks called different collectives)");
      }
    }
    if (elem == 4) sum_share<float>(base_, world_, set, rank_, count);
    else sum_share<double>(base_, world_, set, rank_, count);
    arrive_and_wait(++epoch_);
    std::memcpy(data + done * elem, slot(base_, world_, set, 0), count * elem);
  }
}

}  // namespace ddp::worker
