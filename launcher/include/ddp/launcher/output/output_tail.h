#pragma once
// The last bytes of one worker's stream (its stderr), kept by the launcher
// for the failure report (stderr_failure.h). A ring of at most kBytes, grown
// as bytes arrive (a quiet worker costs nothing); append() is the relay's hot
// path: one or two memcpy, no allocation once full. Pure: no fds, no
// processes; the supervisor owns one per local rank and feeds it from the
// stderr relay (stderr_relay.h), the tee (output_tee.h) or, for a stderr
// redirected to its file, from that file's end (read_file_tail).

#include <cstddef>
#include <string>
#include <vector>

namespace ddp::launcher {

class OutputTail {
 public:
  static constexpr size_t kBytes = 64 * 1024;

  explicit OutputTail(size_t capacity = kBytes) : cap_(capacity) {}
  void append(const char* data, size_t n);
  // The kept bytes in order. When older bytes were dropped, the first
  // (partial) line is left out too, so the text starts at a line.
  std::string text() const;
  bool empty() const { return buf_.empty(); }
  // Bytes appended in all, dropped ones included: grows whenever the worker
  // wrote (what a stall watch can read as "output seen").
  unsigned long long total() const { return total_; }

 private:
  size_t cap_;
  std::vector<char> buf_;  // grows to cap_, then wraps
  size_t head_ = 0;        // once full: where the oldest byte is
  bool wrapped_ = false;   // bytes were dropped
  unsigned long long total_ = 0;
};

// The last `capacity` bytes of a file, through OutputTail::text()'s rule
// ("" when it cannot be read).
std::string read_file_tail(const std::string& path, size_t capacity = OutputTail::kBytes);

}  // namespace ddp::launcher
