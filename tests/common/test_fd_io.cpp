// Reads and writes that retry EINTR and leave EAGAIN to the caller (fd_io.h),
// over pipes.
#include <catch2/catch.hpp>

#include "ddp/common/fd_io.h"

#include <atomic>
#include <csignal>
#include <fcntl.h>
#include <pthread.h>
#include <string>
#include <thread>
#include <unistd.h>

using namespace std::chrono_literals;

namespace {

struct Pipe {
  int r = -1, w = -1;
  explicit Pipe(int flags = 0) {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC | flags) == 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    close_write();
    if (r >= 0) ::close(r);
  }
  void close_write() {
    if (w >= 0) ::close(w);
    w = -1;
  }
};

std::atomic<int> interrupts{0};
void count_interrupt(int) { ++interrupts; }

}  // namespace

TEST_CASE("fd_io: retry_eintr calls again while the call fails with EINTR, and returns anything else") {
  int calls = 0;
  const int r = ddp::fd::retry_eintr([&] {
    if (++calls < 3) {
      errno = EINTR;
      return -1;
    }
    return 7;
  });
  CHECK(r == 7);
  CHECK(calls == 3);
  calls = 0;
  CHECK(ddp::fd::retry_eintr([&] {
          ++calls;
          errno = EBADF;
          return -1;
        }) == -1);
  CHECK(calls == 1);
  CHECK(errno == EBADF);
}

TEST_CASE("fd_io: write_all and read_full move every byte, and a read stops short at end of file, without an error") {
  Pipe p;
  const std::string text = "hello, pipe";
  const ddp::fd::Moved w = ddp::fd::write_all(p.w, text);
  CHECK(w.bytes == text.size());
  CHECK(w.error == 0);
  p.close_write();
  std::string back(64, '\0');
  const ddp::fd::Moved r = ddp::fd::read_full(p.r, back.data(), back.size());
  CHECK(r.bytes == text.size());
  CHECK(r.error == 0);
  CHECK(back.substr(0, r.bytes) == text);
  char c;
  CHECK(ddp::fd::read_some(p.r, &c, 1) == 0);
}

TEST_CASE("fd_io: a full non-blocking pipe stops write_all with EAGAIN, or waits for room when asked") {
  Pipe p(O_NONBLOCK);
  const std::string big(4 << 20, 'x');  // more than any pipe holds
  const ddp::fd::Moved stopped = ddp::fd::write_all(p.w, big);
  CHECK(stopped.error == EAGAIN);
  CHECK(stopped.bytes > 0);
  CHECK(stopped.bytes < big.size());

  // A reader drains the pipe: the waiting write completes.
  std::atomic<size_t> drained{0};
  std::thread reader([&] {
    char buf[65536];
    while (drained < stopped.bytes + big.size()) {
      pollfd in{p.r, POLLIN, 0};
      ::poll(&in, 1, 1000);
      const ssize_t n = ddp::fd::read_some(p.r, buf, sizeof buf);
      if (n > 0) drained += static_cast<size_t>(n);
    }
  });
  const ddp::fd::Moved waited = ddp::fd::write_all(p.w, big, ddp::fd::WhenFull::wait);
  reader.join();
  CHECK(waited.bytes == big.size());
  CHECK(waited.error == 0);
}

TEST_CASE("fd_io: a signal during a blocking read is retried, not an error") {
  struct sigaction sa {}, old {};
  sa.sa_handler = count_interrupt;  // no SA_RESTART: read(2) fails with EINTR
  sigemptyset(&sa.sa_mask);
  REQUIRE(::sigaction(SIGUSR1, &sa, &old) == 0);
  interrupts = 0;
  Pipe p;
  ddp::fd::Moved got;
  std::string buf(5, '\0');
  std::atomic<bool> started{false};
  std::thread reader([&] {
    started = true;
    got = ddp::fd::read_full(p.r, buf.data(), buf.size());
  });
  while (!started) std::this_thread::yield();
  // Interrupt the reader until it has taken a few signals (most hit it
  // inside read), then give it its bytes.
  while (interrupts < 5) {
    ::pthread_kill(reader.native_handle(), SIGUSR1);
    std::this_thread::yield();
  }
  REQUIRE(ddp::fd::write_all(p.w, "abcde").bytes == 5);
  reader.join();
  ::sigaction(SIGUSR1, &old, nullptr);
  CHECK(got.bytes == 5);
  CHECK(got.error == 0);
  CHECK(buf == "abcde");
}

TEST_CASE("fd_io: poll_until answers at once for a ready descriptor and 0 once the deadline has passed") {
  Pipe p;
  pollfd in{p.r, POLLIN, 0};
  const auto now = std::chrono::steady_clock::now();
  CHECK(ddp::fd::poll_until(&in, 1, now - 1s) == 0);
  CHECK(ddp::fd::poll_until(&in, 1, now + 1ms) == 0);  // nothing to read: its deadline passes
  REQUIRE(ddp::fd::write_all(p.w, "x").bytes == 1);
  CHECK(ddp::fd::poll_until(&in, 1, std::chrono::steady_clock::now() + 10s) == 1);
}
