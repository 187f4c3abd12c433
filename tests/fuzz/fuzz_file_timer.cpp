// libFuzzer target: torchrun's file-timer requests as the launcher reads them
// from its pipe (file_timer.h): the bytes cut into reads of varying size, split
// into bounded lines, each parsed and applied to a small table, which is then
// expired. Nothing may crash; a line is never longer than the limit; a parsed
// request has a pid > 0, a finite expiration_time and a signal in
// 0..SIGRTMAX; the table never holds more than its bound; an expired pid
// fires at most a scope with a signal > 0.

#include "ddp/launcher/watch/file_timer.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>

using namespace ddp::launcher;

namespace {
[[noreturn]] void fail(const char* what, const std::string& input) {
  std::fprintf(stderr, "%s for '%s'\n", what, input.c_str());
  std::abort();
}
constexpr size_t kMaxLine = 512;
constexpr size_t kMaxScopes = 8;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  LineSplitter split(kMaxLine);
  TimerTable table(kMaxScopes);
  const char* bytes = reinterpret_cast<const char*>(data);
  double now = 100;
  for (size_t at = 0; at < size;) {
    // The first byte of each piece says how long the read is (1..64 bytes).
    const size_t n = std::min<size_t>(size - at, 1 + static_cast<unsigned char>(bytes[at]) % 64);
    for (const LineSplitter::Line& line : split.feed(bytes + at, n)) {
      if (line.text.size() > kMaxLine) fail("a line over the limit", line.text);
      if (line.too_long) continue;
      std::string why;
      const std::optional<TimerRequest> r = parse_timer_request(line.text, why);
      if (!r) {
        if (why.empty()) fail("a refused line without a reason", line.text);
        continue;
      }
      if (r->pid <= 0) fail("a pid <= 0", line.text);
      if (!std::isfinite(r->expiration_time)) fail("an expiration_time that is not finite", line.text);
      if (r->signal < 0 || r->signal > SIGRTMAX) fail("a signal outside 0..SIGRTMAX", line.text);
      table.apply(*r, now);
      if (table.size() > kMaxScopes) fail("a table over its bound", line.text);
    }
    at += n;
    now += 1;
    for (const ExpiredPid& e : table.take_expired(now))
      if (e.fired && (e.fired->signal <= 0 || e.fired->expiration_time > now)) fail("a scope fired that may not", "");
  }
  return 0;
}
