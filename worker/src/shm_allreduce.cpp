// Shared-memory allreduce for a one-machine Gloo group (see shm_allreduce.h).

#include "shm_allreduce.h"

#include "ddp/common/duration_text.h"
#include "ddp/worker/peer_failure.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

// The name rank 0 gives its segment: /ddp-shm-<its pid>-<random>. The
// launcher removes leaked segments by this form; keep it.
std::string segment_name_head(const std::string& pid0) { return "/ddp-shm-" + pid0 + "-"; }

// Why a segment named in the store may not be used ("" when it may). The
// store is open to whoever reaches its port (docs/security.md), so the name
// must be rank 0's form, and the object itself (checked on the open fd, so
// it cannot change before the mmap) a regular file of this user that nobody
// else can open, of the expected size.
std::string name_problem(const std::string& name, const std::string& pid0) {
  const std::string head = segment_name_head(pid0);
  const bool ok = !pid0.empty() && name.rfind(head, 0) == 0 && name.size() > head.size() &&
                  name.find_first_not_of("0123456789", head.size()) == std::string::npos;
  return ok ? "" : "its name is not " + head + "<n> (rank 0 posted pid " + (pid0.empty() ? "?" : pid0) + ")";
}

std::string object_problem(const struct stat& st, size_t size) {
  const unsigned mode = st.st_mode & 07777;
  if (S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && mode == 0600 && static_cast<size_t>(st.st_size) == size)
    return "";
  std::ostringstream m;
  m << (S_ISREG(st.st_mode) ? "" : "not a regular file, ") << "owned by uid " << st.st_uid << ", mode 0" << std::oct
    << mode << std::dec << ", " << st.st_size << " bytes (expected uid " << ::geteuid() << ", mode 0600, " << size
    << " bytes)";
  return m.str();
}

// Rank 0 makes the segment: O_EXCL and mode 0600, so it is new and ours.
void* create_segment(const std::string& name, size_t size) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  // posix_fallocate, not ftruncate: the pages are reserved now, so a small
  // /dev/shm (a container's 64 MiB) fails here instead of SIGBUS later.
  if (::posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    return nullptr;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

// The other ranks map the segment the decision names, after checking it.
// On failure returns null and says why: "refused the shared-memory segment
// N: ..." (it may not be used) or "could not map N: ...".
void* open_segment(const std::string& name, const std::string& pid0, size_t size, std::string* problem) {
  if (auto p = name_problem(name, pid0); !p.empty()) {
    *problem = "refused the shared-memory segment " + name + ": " + p;
    return nullptr;
  }
  // O_NONBLOCK: a FIFO planted under the name must not block the open.
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK, 0);
  if (fd < 0) {
    *problem = "could not map " + name + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    *problem = "could not map " + name + ": fstat: " + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  if (auto p = object_problem(st, size); !p.empty()) {
    *problem = "refused the shared-memory segment " + name + ": " + p;
    ::close(fd);
    return nullptr;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    *problem = "could not map " + name + ": mmap: " + std::strerror(errno);
    return nullptr;
  }
  return p;
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
        name = segment_name_head(std::to_string(::getpid())) + std::to_string(rd());
        base = create_segment(name, size);
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
  // only one that passes open_segment's checks.
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
    base = open_segment(name, pid0, size, &problem);
  }
  if (!problem.empty() && problem.rfind("refused", 0) == 0)
    std::cerr << "ddp_worker: warning: rank " << rank << " " << problem
              << "; sums stay on Gloo (someone who can reach the store wrote into it? see docs/security.md)"
              << std::endl;
  store.set(prefix + "ok/" + std::to_string(rank), bytes(problem.empty() ? "1" : "0 " + problem));
  std::vector<std::string> ok_keys;
  for (int r = 0; r < world; ++r) ok_keys.push_back(prefix + "ok/" + std::to_string(r));
  store.wait(ok_keys, timeout);
  std::string failed;
  for (int r = 0; r < world && failed.empty(); ++r) {
    const std::string ok = text(store.get(ok_keys[r]));
    if (ok != "1")
      failed = "rank " + std::to_string(r) + " " + (ok.size() > 2 ? ok.substr(2) : "could not map " + name);
  }
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

}  // namespace

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
    char* chunk = data + done * elem;
    char* own_slot = slot(base_, world_, set, rank_);
    // The peers need this rank's values for their shares (and this rank
    // their sums of them, after the second barrier).
    const auto [lo, hi] = share_of(count, world_, rank_);
    std::memcpy(own_slot, chunk, lo * elem);
    std::memcpy(own_slot + hi * elem, chunk + hi * elem, (count - hi) * elem);
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
