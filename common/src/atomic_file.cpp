#include "ddp/common/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace ddp {
namespace {

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

}  // namespace

std::string atomic_temp_path(const std::string& path) {
  const std::string dir = dir_of(path);
  return dir + (dir == "/" ? "." : "/.") + base_of(path) + ".tmp." + std::to_string(::getpid());
}

void write_file_atomically(const std::string& path, std::string_view data, mode_t mode) {
  const std::string tmp = atomic_temp_path(path);
  int fd = -1;
  // Closes and removes the temp file, keeping the errno of the failed step.
  auto fail = [&](const std::string& step, const std::string& file) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw AtomicWriteError(step + " '" + file + "': " + std::strerror(err));
  };
  fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) fail("creating temp file", tmp);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("writing", tmp);
    done += static_cast<std::size_t>(n);
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
