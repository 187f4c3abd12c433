#pragma once
// Reads and writes on a file descriptor as every part of the project needs
// them: a signal's EINTR is retried, never an error, and a non-blocking
// descriptor's EAGAIN is the caller's choice (wait for room, or stop and
// say so). Owns no descriptor: never opens, closes or changes one's flags.
// Used by the launcher (pipes, consoles, logs), the worker's loop
// (metrics.jsonl) and common/ itself (atomic and output files).

#include <chrono>
#include <cstddef>
#include <cerrno>
#include <poll.h>
#include <string_view>
#include <sys/types.h>

namespace ddp::fd {

// Calls f until it does not fail with EINTR; returns its last result.
// For the calls with no loop of their own: waitpid, wait4, flock, recv...
template <class F>
auto retry_eintr(F&& f) -> decltype(f()) {
  for (;;) {
    auto r = f();
    if (!(r < 0 && errno == EINTR)) return r;
  }
}

// How many bytes moved, and why fewer than asked: error is the errno that
// stopped it, 0 when all moved, or (short, error 0) at a read's end of file
// or a write that moved nothing.
struct Moved {
  size_t bytes = 0;
  int error = 0;
};

// What write_all does when a non-blocking descriptor is full (EAGAIN).
enum class WhenFull {
  stop,  // return, error EAGAIN
  wait,  // poll(2) for room, without a bound, and go on
};

// Writes all n bytes, or stops at the first error.
Moved write_all(int fd, const void* data, size_t n, WhenFull when_full = WhenFull::stop);
inline Moved write_all(int fd, std::string_view s, WhenFull when_full = WhenFull::stop) {
  return write_all(fd, s.data(), s.size(), when_full);
}

// One read(2): >0 bytes, 0 at end of file, -1 with errno (EAGAIN included).
ssize_t read_some(int fd, void* buf, size_t n);

// Reads until n bytes, the end of the file or an error.
Moved read_full(int fd, void* buf, size_t n);
// The same with pread(2) from offset `at`.
Moved pread_full(int fd, void* buf, size_t n, off_t at);

// poll(2) until `deadline`: a signal's wake polls again for the time left.
// Returns poll's count of ready descriptors, 0 when the deadline passed,
// -1 with errno for another error.
int poll_until(pollfd* fds, size_t n, std::chrono::steady_clock::time_point deadline);

}  // namespace ddp::fd
