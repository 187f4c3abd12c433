#pragma once
// A real "disk full" for a test: lowers this process's file-size limit
// (RLIMIT_FSIZE) for the current scope, with SIGXFSZ ignored, so a write
// past it fails with EFBIG the way a full disk or quota fails it. Process
// wide: every thread's writes to regular files are limited while it lives
// (Catch runs one case at a time). Restores both on destruction.

#include <sys/resource.h>

#include <csignal>

namespace ddp::test {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = saved_;
    r.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*old_handler_)(int) = nullptr;
};

}  // namespace ddp::test
