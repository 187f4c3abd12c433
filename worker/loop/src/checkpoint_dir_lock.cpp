#include "ddp/loop/checkpoint_dir_lock.h"

#include "ddp/common/fd_io.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/file.h>
#include <unistd.h>

namespace ddp::loop {
namespace {

std::string read_holder(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string text = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

}  // namespace

std::string checkpoint_lock_path(const std::string& dir) { return dir + "/.ddp-loop.lock"; }

std::string this_host() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

CheckpointDirLock::CheckpointDirLock(const std::string& dir) : path_(checkpoint_lock_path(dir)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error("checkpoint directory '" + dir + "' is not writable (creating its lock file '" +
                             path_ + "': " + std::strerror(errno) + "); pass a writable --checkpoint_dir");
  const int rc = ddp::fd::retry_eintr([&] { return ::flock(fd_, LOCK_EX | LOCK_NB); });
  if (rc != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK)
      throw std::runtime_error("cannot lock '" + path_ + "' of checkpoint directory '" + dir +
                               "': " + std::strerror(err));
    throw std::runtime_error("checkpoint directory '" + dir + "' is in use by another training run (" +
                             (holder.empty() ? std::string("a process that has not written its pid yet")
                                             : holder) +
                             " holds " + path_ + "); wait for it to finish or pass another --checkpoint_dir");
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " on host " + this_host() + "\n";
  // Best effort: the lock is what counts, the text only names the holder.
  if (::ftruncate(fd_, 0) == 0) [[maybe_unused]] const ssize_t written = ::pwrite(fd_, me.data(), me.size(), 0);
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ddp::loop
