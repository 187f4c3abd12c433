#include "ddp/common/output_file.h"

#include "ddp/common/duration_text.h"
#include "ddp/common/fd_io.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp {
namespace {

[[noreturn]] void fail(const std::string& step, const std::string& path, int err, const std::string& why = "") {
  throw AtomicWriteError(step + " '" + path + "': " + std::strerror(err) + why);
}

bool same_file(const struct stat& st, int fd) {
  struct stat other {};
  return ::fstat(fd, &other) == 0 && other.st_dev == st.st_dev && other.st_ino == st.st_ino;
}

// Writes all of `data` to a non-blocking fd, waiting for POLLOUT while the
// other end (a FIFO's reader, a terminal under flow control) is full, up to
// `wait` in all.
void write_all(int fd, std::string_view data, std::chrono::milliseconds wait, const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::size_t done = 0;
  while (done < data.size()) {
    const ddp::fd::Moved m = ddp::fd::write_all(fd, data.substr(done));
    done += m.bytes;
    if (done == data.size()) break;
    if (m.error == 0) continue;  // a write that moved nothing: try again, as before
    if (m.error != EAGAIN) fail("writing", path, m.error);
    pollfd p{fd, POLLOUT, 0};
    const int r = ddp::fd::poll_until(&p, 1, deadline);
    if (r < 0) fail("waiting to write", path, errno);
    if (r == 0)
      throw AtomicWriteError("writing '" + path + "': its reader took " + std::to_string(done) + " of " +
                             std::to_string(data.size()) + " bytes in " + seconds_text(wait) + " and no more");
  }
}

}  // namespace

OutputWay output_way(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return OutputWay::Replace;
  return OutputWay::WriteThrough;
}

bool may_follow_link(const struct stat& link, const struct stat& dir, uid_t follower) {
  const bool sticky_world_writable = (dir.st_mode & S_ISVTX) && (dir.st_mode & S_IWOTH);
  return !sticky_world_writable || link.st_uid == follower || link.st_uid == dir.st_uid;
}

std::string planted_link_reason(const std::string& path) {
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return "";
  const auto slash = path.rfind('/');
  const std::string dir_path = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat dir {};
  if (::stat(dir_path.c_str(), &dir) != 0 || may_follow_link(link, dir, ::geteuid())) return "";
  return "a symlink in the sticky, world-writable directory '" + dir_path + "' owned by uid " +
         std::to_string(link.st_uid) +
         ", neither yours nor the directory owner's (another user may have planted it; the kernel's "
         "fs.protected_symlinks rule)";
}

void write_output_file(const std::string& path, std::string_view data, mode_t mode,
                       std::chrono::milliseconds reader_wait) {
  if (output_way(path) == OutputWay::Replace) {
    write_file_atomically(path, data, mode);
    return;
  }
  if (const std::string why = planted_link_reason(path); !why.empty())
    throw AtomicWriteError("following '" + path + "': " + why + "; remove it or give another path");
  // No O_CREAT, no O_TRUNC: only what is there is written, and a FIFO
  // without a reader fails at once instead of waiting for one.
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail("opening", path, err, err == ENXIO ? " (a FIFO that nobody reads)" : "");
  }
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail("fstat of", path, errno);
    if (S_ISREG(st.st_mode)) {
      if (same_file(st, STDOUT_FILENO) || same_file(st, STDERR_FILENO)) {
        if (::lseek(fd, 0, SEEK_END) < 0) fail("seeking to the end of", path, errno);
      } else if (::ftruncate(fd, 0) != 0) {
        fail("truncating", path, errno);
      }
    }
    write_all(fd, data, reader_wait, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0 && errno != EINTR) fail("closing", path, errno);
}

}  // namespace ddp
