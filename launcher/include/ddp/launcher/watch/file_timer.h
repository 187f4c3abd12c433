#pragma once
// torchrun's file timer, the protocol half: pure (no fd, no process, no
// clock of its own), so tests drive it with plain values. A worker's
// torch.distributed.elastic.timer.FileTimerClient (torch 1.13 and 2.11 alike;
// `expires(after=...)` uses it) sends each request as one JSON line of at most
// PIPE_BUF bytes on a named pipe:
//   {"version": 1, "pid": 4242, "scope_id": "load_batch", "expiration_time": 1764589060.5, "signal": 9}
// expiration_time is wall-clock seconds (Python's time.time()); a negative one
// releases the scope. As torch 2.11's FileTimerServer: the table is keyed by
// (pid, scope_id), an acquire replaces that key's entry, a release removes it,
// "version" and unknown keys are not looked at, and when a pid has expired
// scopes all of its scopes go at once, the signal being that of its first
// expired scope (by expiration time) with a signal > 0.
// Stricter than FileTimerServer, which throws on such a line and loses the
// rest of its batch: a line that is not a flat JSON object with those four
// fields, a pid <= 0, a signal that is no signal, or a line longer than
// PIPE_BUF is refused on its own, and the table holds at most `max_scopes`.
// Who owns the pipe and who may be signalled: file_timer_server.h; what an
// expiry does to the job: the supervisor.

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace ddp::launcher {

struct TimerRequest {
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;  // wall-clock seconds; < 0: release
  int signal = 0;              // <= 0: the scope expires without a signal
  bool release() const { return expiration_time < 0; }
};

// One line (without its '\n'). nullopt with `why` saying what is wrong.
std::optional<TimerRequest> parse_timer_request(const std::string& line, std::string& why);

// The pipe's bytes as lines, at most max_line bytes each: a longer one is
// dropped whole (up to its '\n'); its start is kept for the warning.
class LineSplitter {
 public:
  explicit LineSplitter(size_t max_line) : max_line_(max_line) {}
  struct Line {
    std::string text;       // the line, or the first bytes of one too long
    bool too_long = false;
  };
  std::vector<Line> feed(const char* data, size_t n);

 private:
  size_t max_line_;
  std::string partial_;
  bool discarding_ = false;  // inside a line already too long
};

// An acquired scope.
struct TimerScope {
  pid_t pid = 0;
  std::string scope_id;
  double expiration_time = 0;
  double acquired_at = 0;  // when the launcher got the request (wall-clock seconds)
  int signal = 0;
};

// A pid whose scopes expired: every one of them, by expiration time, and the
// one whose signal it gets (nullopt: none asked for a signal).
struct ExpiredPid {
  pid_t pid = 0;
  std::vector<TimerScope> scopes;
  std::optional<TimerScope> fired;
};

class TimerTable {
 public:
  explicit TimerTable(size_t max_scopes) : max_scopes_(max_scopes) {}
  // Applies a request received at `now`. false: an acquire of a new scope
  // when the table is full (it is not recorded).
  bool apply(const TimerRequest& r, double now);
  // The earliest expiration_time, nullopt when no scope is held.
  std::optional<double> next_expiration() const;
  // Removes and returns every pid that has a scope with expiration_time <= now.
  std::vector<ExpiredPid> take_expired(double now);
  void drop_pid(pid_t pid);  // the process is gone: its scopes with it
  void clear() { scopes_.clear(); }
  size_t size() const { return scopes_.size(); }

 private:
  size_t max_scopes_;
  std::map<std::pair<pid_t, std::string>, TimerScope> scopes_;
};

// What the failure report says of the scope whose expiry ended an attempt.
struct ExpiredScope {
  std::string scope_id;
  pid_t pid = 0;       // the process that got the signal (the worker, or a child of it)
  int signal = 0;      // the signal sent (> 0)
  double acquired_for_s = 0;                          // expiration_time - acquired_at
  std::chrono::system_clock::time_point acquired_at;  // when the launcher got the acquire
  std::chrono::system_clock::time_point expired_at;   // when the launcher sent the signal: the failure's time
};

// "timer scope 'load_batch' expired (acquired for 1.0 s at 2026-12-01 11:40:01 UTC; sent SIGKILL)"
std::string format_expired_scope(const ExpiredScope& e);

}  // namespace ddp::launcher
