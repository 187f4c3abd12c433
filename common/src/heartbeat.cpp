#include "ddp/common/heartbeat.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp {

namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'H', 'B', '0', '0', '2'};
constexpr size_t kFileSize = 4096;

using Field = std::atomic<uint64_t>;
static_assert(Field::is_always_lock_free, "heartbeat fields must be lock-free in shared memory");

std::string errno_text() { return std::strerror(errno); }

}  // namespace

struct StepEntry {
  Field mark;  // its mark's index + 1, stored last (0 while it is written)
  Field step, start_ns, wait_ns;
};
struct CollectiveEntry {
  Field seq, kind_bytes, start_ns, end_ns;
};
constexpr int kKindShift = 56;
constexpr uint64_t kBytesMask = (uint64_t{1} << kKindShift) - 1;

struct Heartbeat::Record {
  char magic[8];
  Field pid;
  Field collective_started;
  Field collective_finished;
  Field kind;
  Field bytes;
  Field step;
  Field wait_ns;
  Field steps_marked;
  Field exiting_ns;
  Field recovery_capable;
  Field recovery_generation;
  Field reserved[4];
  StepEntry steps[kStepRing];
  CollectiveEntry collectives[kCollectiveRing];
};
static_assert(offsetof(Heartbeat::Record, wait_ns) == 56, "the layout heartbeat.h documents");
static_assert(offsetof(Heartbeat::Record, exiting_ns) == 72, "the layout heartbeat.h documents");
static_assert(offsetof(Heartbeat::Record, recovery_capable) == 80, "the layout heartbeat.h documents");
static_assert(offsetof(Heartbeat::Record, recovery_generation) == 88, "the layout heartbeat.h documents");
static_assert(offsetof(Heartbeat::Record, steps) == 128, "the layout heartbeat.h documents");
static_assert(offsetof(Heartbeat::Record, collectives) == 1664, "the layout heartbeat.h documents");
static_assert(sizeof(Heartbeat::Record) == 4096, "the record fills its page");

uint64_t monotonic_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

const char* collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::Allreduce: return "allreduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Allgather: return "allgather";
    case CollectiveKind::Barrier: return "barrier";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Other: return "collective";
    case CollectiveKind::None: break;
  }
  return "none";
}

namespace {

void* map_fd(int fd, const std::string& path) {
  void* p = ::mmap(nullptr, kFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const std::string why = errno_text();
    ::close(fd);
    throw std::runtime_error("cannot map the heartbeat file " + path + ": " + why);
  }
  ::close(fd);  // the mapping keeps the file
  return p;
}

}  // namespace

std::unique_ptr<Heartbeat> Heartbeat::create(const std::string& path) {
  static_assert(sizeof(Record) <= kFileSize, "the record fits in its page");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw std::runtime_error("cannot create the heartbeat file " + path + ": " + errno_text());
  if (::ftruncate(fd, kFileSize) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw std::runtime_error("cannot size the heartbeat file " + path + ": " + why);
  }
  auto* rec = static_cast<Record*>(map_fd(fd, path));  // zeros: every field 0
  std::memcpy(rec->magic, kMagic, sizeof(kMagic));
  return std::unique_ptr<Heartbeat>(new Heartbeat(path, rec));
}

std::unique_ptr<Heartbeat> Heartbeat::create_sealed() {
  const int fd = ::memfd_create("ddp-heartbeat", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::runtime_error("cannot create a heartbeat page (memfd_create): " + errno_text());
  if (::ftruncate(fd, kFileSize) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw std::runtime_error("cannot size and seal a heartbeat page: " + why);
  }
  const int keep = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // map_fd closes the one it maps
  if (keep < 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw std::runtime_error("cannot keep a heartbeat page's fd: " + why);
  }
  auto* rec = static_cast<Record*>(map_fd(fd, "(memfd)"));
  std::memcpy(rec->magic, kMagic, sizeof(kMagic));
  return std::unique_ptr<Heartbeat>(new Heartbeat("(memfd)", rec, keep));
}

std::string Heartbeat::fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

void Heartbeat::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

// The fd n of a path fd_path(n); -1 for any other path.
int inherited_fd(const std::string& path) {
  const std::string prefix = "/proc/self/fd/";
  if (path.compare(0, prefix.size(), prefix) != 0 || path.size() == prefix.size() || path.size() > prefix.size() + 9)
    return -1;
  int n = 0;
  for (size_t i = prefix.size(); i < path.size(); ++i) {
    if (path[i] < '0' || path[i] > '9') return -1;
    n = n * 10 + (path[i] - '0');
  }
  return n;
}

}  // namespace

std::unique_ptr<Heartbeat> Heartbeat::attach(const std::string& path) {
  const int inherited = inherited_fd(path);
  const int fd = inherited >= 0 ? inherited : ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error("cannot open the heartbeat file " + path + ": " + errno_text());
  if (inherited >= 0) {  // only a page no one can shrink under the mapping
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 && errno == EBADF)
      throw std::runtime_error("cannot use the heartbeat page " + path + ": " + errno_text() +
                               " (not inherited from ddp-launch)");
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
      ::close(fd);
      throw std::runtime_error("the heartbeat page " + path + " is not a sealed heartbeat page made by ddp-launch");
    }
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != static_cast<off_t>(kFileSize)) {
    ::close(fd);
    throw std::runtime_error("the heartbeat file " + path + " is not a " + std::to_string(kFileSize) +
                             "-byte regular file made by ddp-launch");
  }
  auto* rec = static_cast<Record*>(map_fd(fd, path));
  if (std::memcmp(rec->magic, kMagic, sizeof(kMagic)) != 0) {
    ::munmap(rec, kFileSize);
    throw std::runtime_error("the heartbeat file " + path + " was not made by ddp-launch (wrong magic)");
  }
  rec->pid.store(static_cast<uint64_t>(::getpid()), std::memory_order_release);
  return std::unique_ptr<Heartbeat>(new Heartbeat(path, rec));
}

Heartbeat::~Heartbeat() {
  ::munmap(rec_, kFileSize);
  close_fd();
}

void Heartbeat::collective_started(uint64_t seq, CollectiveKind kind, uint64_t bytes) {
  if (seq > 0) {
    CollectiveEntry& e = rec_->collectives[(seq - 1) % kCollectiveRing];
    e.seq.store(0, std::memory_order_relaxed);  // a reader sees no whole entry until seq is back
    std::atomic_thread_fence(std::memory_order_release);
    e.kind_bytes.store(static_cast<uint64_t>(kind) << kKindShift | (bytes & kBytesMask), std::memory_order_relaxed);
    e.start_ns.store(monotonic_ns(), std::memory_order_relaxed);
    e.end_ns.store(0, std::memory_order_relaxed);
    e.seq.store(seq, std::memory_order_release);
  }
  rec_->kind.store(static_cast<uint64_t>(kind), std::memory_order_relaxed);
  rec_->bytes.store(bytes, std::memory_order_relaxed);
  rec_->collective_started.store(seq, std::memory_order_release);
}

void Heartbeat::mark_end(uint64_t seq) {
  if (seq == 0) return;
  CollectiveEntry& e = rec_->collectives[(seq - 1) % kCollectiveRing];
  if (e.seq.load(std::memory_order_acquire) != seq) return;  // overwritten: too old to matter
  uint64_t zero = 0;  // the first finisher's time (a callback, then the wait)
  e.end_ns.compare_exchange_strong(zero, monotonic_ns(), std::memory_order_release, std::memory_order_relaxed);
}

void Heartbeat::collective_finished(uint64_t seq) {
  mark_end(seq);
  rec_->collective_finished.store(seq, std::memory_order_release);
}

void Heartbeat::collective_finished_at_least(uint64_t seq) {
  mark_end(seq);
  uint64_t cur = rec_->collective_finished.load(std::memory_order_relaxed);
  while (cur < seq &&
         !rec_->collective_finished.compare_exchange_weak(cur, seq, std::memory_order_release,
                                                          std::memory_order_relaxed)) {
  }
}

void Heartbeat::set_step(uint64_t step) {
  const uint64_t n = rec_->steps_marked.load(std::memory_order_relaxed);
  StepEntry& e = rec_->steps[n % kStepRing];
  e.mark.store(0, std::memory_order_relaxed);  // a reader sees no whole entry until its mark is back
  std::atomic_thread_fence(std::memory_order_release);
  e.step.store(step, std::memory_order_relaxed);
  e.start_ns.store(monotonic_ns(), std::memory_order_relaxed);
  e.wait_ns.store(rec_->wait_ns.load(std::memory_order_relaxed), std::memory_order_relaxed);
  e.mark.store(n + 1, std::memory_order_release);
  rec_->steps_marked.store(n + 1, std::memory_order_release);
  rec_->step.store(step, std::memory_order_release);
}

void Heartbeat::add_wait_ns(uint64_t ns) { rec_->wait_ns.fetch_add(ns, std::memory_order_relaxed); }

void Heartbeat::mark_exiting() {
  uint64_t none = 0;  // the first mark stays: a second exit path changes nothing
  rec_->exiting_ns.compare_exchange_strong(none, monotonic_ns(), std::memory_order_release);
}

void Heartbeat::set_recovery_capable(bool capable) {
  rec_->recovery_capable.store(capable ? 1 : 0, std::memory_order_release);
}

void Heartbeat::set_recovery_generation(uint64_t generation) {
  rec_->recovery_generation.store(generation, std::memory_order_release);
}

uint64_t Heartbeat::recovery_generation() const {
  return rec_->recovery_generation.load(std::memory_order_acquire);
}

HeartbeatSnapshot Heartbeat::read() const {
  HeartbeatSnapshot s;
  s.pid = rec_->pid.load(std::memory_order_acquire);
  s.collective_started = rec_->collective_started.load(std::memory_order_acquire);
  s.collective_finished = rec_->collective_finished.load(std::memory_order_acquire);
  s.kind = static_cast<CollectiveKind>(rec_->kind.load(std::memory_order_relaxed));
  s.bytes = rec_->bytes.load(std::memory_order_relaxed);
  s.step = rec_->step.load(std::memory_order_acquire);
  s.wait_ns = rec_->wait_ns.load(std::memory_order_relaxed);
  s.steps_marked = rec_->steps_marked.load(std::memory_order_acquire);
  s.exiting_ns = rec_->exiting_ns.load(std::memory_order_acquire);
  s.recovery_capable = rec_->recovery_capable.load(std::memory_order_acquire) == 1;
  s.recovery_generation = rec_->recovery_generation.load(std::memory_order_acquire);
  return s;
}

// The writer may overwrite an entry while it is read: an entry is kept only
// when it holds the same mark before and after its fields were read.
uint64_t Heartbeat::read_steps(uint64_t& next, std::vector<StepMark>& out) const {
  const uint64_t end = rec_->steps_marked.load(std::memory_order_acquire);
  if (end < next) next = end;  // a page written anew (never by one writer)
  uint64_t lost = 0;
  if (end - next > static_cast<uint64_t>(kStepRing)) {
    lost = end - next - kStepRing;
    next = end - kStepRing;
  }
  for (uint64_t n = next; n < end; ++n) {
    const StepEntry& e = rec_->steps[n % kStepRing];
    const uint64_t before = e.mark.load(std::memory_order_acquire);
    StepMark m{e.step.load(std::memory_order_relaxed), e.start_ns.load(std::memory_order_relaxed),
               e.wait_ns.load(std::memory_order_relaxed)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (before == n + 1 && e.mark.load(std::memory_order_relaxed) == n + 1) out.push_back(m);
    else ++lost;  // overwritten by a later mark
  }
  next = end;
  return lost;
}

uint64_t Heartbeat::read_collectives(uint64_t& next, std::vector<CollectiveMark>& out) const {
  if (next == 0) next = 1;
  const uint64_t last = rec_->collective_started.load(std::memory_order_acquire);
  if (last + 1 < next) next = last + 1;
  uint64_t lost = 0;
  for (; next <= last; ++next) {
    const CollectiveEntry& e = rec_->collectives[(next - 1) % kCollectiveRing];
    const uint64_t seq = e.seq.load(std::memory_order_acquire);
    if (seq < next) break;  // not yet written (or being written): look again later
    if (seq > next) {       // overwritten by a later collective
      ++lost;
      continue;
    }
    CollectiveMark m;
    const uint64_t kb = e.kind_bytes.load(std::memory_order_relaxed);
    m.seq = seq;
    m.kind = static_cast<CollectiveKind>(kb >> kKindShift);
    m.bytes = kb & kBytesMask;
    m.start_ns = e.start_ns.load(std::memory_order_relaxed);
    m.end_ns = e.end_ns.load(std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) != seq) {  // overwritten while read
      ++lost;
      continue;
    }
    if (m.end_ns == 0) break;  // not finished yet
    out.push_back(m);
  }
  return lost;
}

}  // namespace ddp
