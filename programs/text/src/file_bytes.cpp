#include "file_bytes.h"

#include "ddp/common/fd_io.h"
#include "ddp/text/text_data_error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::text::detail {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err, const std::string& fix) {
  throw TextDataError("cannot " + what + " " + path + ": " + std::strerror(err) + "; " + fix);
}

}  // namespace

std::optional<std::string> read_file_bytes(const std::string& path, const std::string& fix) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    fail("open", path, errno, fix);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("stat", path, err, fix);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw TextDataError(path + " is not a regular file; " + fix);
  }
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  // Short at end of file: it shrank while reading, keep what is there.
  const ddp::fd::Moved got = ddp::fd::read_full(fd, data.data(), data.size());
  if (got.error != 0) {
    ::close(fd);
    fail("read", path, got.error, fix);
  }
  data.resize(got.bytes);
  ::close(fd);
  return data;
}

}  // namespace ddp::text::detail
