#include "ddp/common/heartbeat.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp {

namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'H', 'B', '0', '0', '1'};
constexpr size_t kFileSize = 4096;

using Field = std::atomic<uint64_t>;
static_assert(Field::is_always_lock_free, "heartbeat fields must be lock-free in shared memory");

std::string errno_text() { return std::strerror(errno); }

}  // namespace

struct Heartbeat::Record {
  char magic[8];
  Field pid;
  Field collective_started;
  Field collective_finished;
  Field kind;
  Field bytes;
  Field step;
};

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
  rec_->kind.store(static_cast<uint64_t>(kind), std::memory_order_relaxed);
  rec_->bytes.store(bytes, std::memory_order_relaxed);
  rec_->collective_started.store(seq, std::memory_order_release);
}

void Heartbeat::collective_finished(uint64_t seq) {
  rec_->collective_finished.store(seq, std::memory_order_release);
}

void Heartbeat::collective_finished_at_least(uint64_t seq) {
  uint64_t cur = rec_->collective_finished.load(std::memory_order_relaxed);
  while (cur < seq &&
         !rec_->collective_finished.compare_exchange_weak(cur, seq, std::memory_order_release,
                                                          std::memory_order_relaxed)) {
  }
}

void Heartbeat::set_step(uint64_t step) { rec_->step.store(step, std::memory_order_release); }

HeartbeatSnapshot Heartbeat::read() const {
  HeartbeatSnapshot s;
  s.pid = rec_->pid.load(std::memory_order_acquire);
  s.collective_started = rec_->collective_started.load(std::memory_order_acquire);
  s.collective_finished = rec_->collective_finished.load(std::memory_order_acquire);
  s.kind = static_cast<CollectiveKind>(rec_->kind.load(std::memory_order_relaxed));
  s.bytes = rec_->bytes.load(std::memory_order_relaxed);
  s.step = rec_->step.load(std::memory_order_acquire);
  return s;
}

}  // namespace ddp
