#include "ddp/launcher/output/output_tail.h"

#include <algorithm>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::launcher {

void OutputTail::append(const char* data, size_t n) {
  total_ += n;
  if (cap_ == 0 || n == 0) return;
  if (n >= cap_) {  // only its last cap_ bytes stay
    wrapped_ = wrapped_ || n > cap_ || !buf_.empty();
    buf_.assign(data + (n - cap_), data + n);
    head_ = 0;
    return;
  }
  if (buf_.size() < cap_) {  // still growing
    const size_t room = cap_ - buf_.size();
    const size_t first = std::min(room, n);
    buf_.insert(buf_.end(), data, data + first);
    data += first;
    n -= first;
    if (n == 0) return;
  }
  // Full: overwrite the oldest bytes, wrapping at the end.
  wrapped_ = true;
  const size_t first = std::min(n, cap_ - head_);
  std::memcpy(buf_.data() + head_, data, first);
  std::memcpy(buf_.data(), data + first, n - first);
  head_ = (head_ + n) % cap_;
}

std::string OutputTail::text() const {
  std::string out;
  out.reserve(buf_.size());
  out.append(buf_.begin() + static_cast<std::ptrdiff_t>(head_), buf_.end());
  out.append(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(head_));
  if (wrapped_) {
    const size_t nl = out.find('\n');
    out.erase(0, nl == std::string::npos ? out.size() : nl + 1);
  }
  return out;
}

std::string read_file_tail(const std::string& path, size_t capacity) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return "";
  struct stat st;
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const off_t start = st.st_size > static_cast<off_t>(capacity) ? st.st_size - static_cast<off_t>(capacity) : 0;
    out.resize(static_cast<size_t>(st.st_size - start));
    size_t got = 0;
    while (got < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, start + static_cast<off_t>(got));
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    out.resize(got);
    if (start > 0) {
      const size_t nl = out.find('\n');
      out.erase(0, nl == std::string::npos ? out.size() : nl + 1);
    }
  }
  ::close(fd);
  return out;
}

}  // namespace ddp::launcher
