// Shared-memory segments made by rank 0 and checked by the others (see shm_segment.h).

#include "shm_segment.h"

#include "ddp/common/shm_name.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <sstream>

namespace ddp::worker {

std::string new_shm_segment_name() { return shm_segment_name(::getpid(), std::random_device{}()); }

namespace {

// Why a segment named in the store may not be used ("" when it may). The
// store is open to whoever reaches its port (docs/security.md), so the name
// must be rank 0's form, and the object itself (checked on the open fd, so
// it cannot change before the mmap) a regular file of this user that nobody
// else can open, of the expected size.
std::string name_problem(const std::string& name, const std::string& pid0) {
  const std::string head = shm_segment_name_head(pid0);
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

}  // namespace

// O_EXCL and mode 0600: the segment is new and ours.
void* create_shm_segment(const std::string& name, size_t size) {
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

void* open_shm_segment(const std::string& name, const std::string& pid0, size_t size, std::string* problem) {
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

}  // namespace ddp::worker
