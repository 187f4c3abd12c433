#include "ddp/common/atomic_file.h"

#include "ddp/common/fd_io.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

namespace ddp {
namespace {

// Names drawn before giving up: a clash of 64 random bits means someone
// plants names faster than we draw them, not bad luck.
constexpr int kNameAttempts = 16;

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

unsigned long long random_bits() {
  unsigned long long v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  // No entropy yet (early boot): unpredictable enough against a planter
  // that must guess it before we create it, and O_EXCL stays the guard.
  static unsigned long long counter = 0;
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return static_cast<unsigned long long>(now) * 0x9E3779B97F4A7C15ull ^ (++counter << 32) ^
         static_cast<unsigned long long>(::getpid());
}

std::string random_name(const std::string& prefix) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", random_bits());
  return prefix + hex;
}

}  // namespace

std::string atomic_temp_prefix(const std::string& path) {
  const std::string dir = dir_of(path);
  return dir + (dir == "/" ? "." : "/.") + base_of(path) + ".tmp." + std::to_string(::getpid()) + ".";
}

void write_file_atomically(const std::string& path, std::string_view data, mode_t mode) {
  const std::string prefix = atomic_temp_prefix(path);
  std::string tmp;
  int fd = -1;
  bool created = false;
  // Closes and removes the temp file (only ever one we created), keeping the
  // errno of the failed step.
  auto fail = [&](const std::string& step, const std::string& file) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (created) ::unlink(tmp.c_str());
    throw AtomicWriteError(step + " '" + file + "': " + std::strerror(err));
  };
  for (int attempt = 0; attempt < kNameAttempts && fd < 0; ++attempt) {
    tmp = random_name(prefix);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) fail("creating temp file", tmp);
  created = true;
  const ddp::fd::Moved written = ddp::fd::write_all(fd, data);
  if (written.bytes < data.size()) {
    errno = written.error != 0 ? written.error : EIO;
    fail("writing", tmp);
  }
  // Data on disk before the rename makes it visible: otherwise a crash can
  // leave the new name pointing at an empty or partial file.
  if (::fsync(fd) != 0) fail("fsync of", tmp);
  const int rc = ::close(fd);
  fd = -1;
  if (rc != 0) fail("closing", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming over", path);
  const std::string dir = dir_of(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on a directory
    ::close(dfd);
  }
}

}  // namespace ddp
