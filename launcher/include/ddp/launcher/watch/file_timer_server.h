#pragma once
// torchrun's file timer, the pipe half: with TORCHELASTIC_ENABLE_FILE_TIMER=1
// the launcher makes this named pipe before the first worker, tells the
// workers its path in TORCHELASTIC_TIMER_FILE (worker_env.h), and the
// supervisor's one poll loop reads it (fd()) and sleeps no longer than the
// nearest expiry (ms_to_next_expiry()); no thread, as torchrun's watchdog
// thread has. The requests and the table are file_timer.h's.
//  - The path: TORCHELASTIC_TIMER_FILE when the user set it (as torchrun),
//    else `watchdog_timer` in the private run directory (run_dir.h; torchrun
//    uses $TMPDIR/watchdog_timer_<uuid>). Mode 0600. A named pipe of this
//    user's already there (an old run's) is replaced, as torchrun does; one
//    of another user's is an error naming its owner, left where it is
//    (torchrun as root deletes it; its owner could read or inject the
//    workers' requests); anything else there is an error (torchrun would
//    delete it). The pipe opened must be the one made (checked on the fds:
//    a FIFO of this user's, mode 0600, no symlink followed).
//  - The launcher holds the read end and a write end of its own, so the pipe
//    never reads end-of-file between clients (each FileTimerClient request
//    opens, writes one line, closes) and a client never finds it without a
//    reader (its open would fail with ENXIO).
//  - Bounded: lines of at most PIPE_BUF bytes (the client's own limit), at
//    most kMaxScopes scopes, at most kMaxReadBytes read per call (a flooding
//    worker cannot starve the rest of the loop). A refused line never stops
//    the launcher; the first one of the run is returned as a warning.
//  - Removed (if it is still the pipe made here) at destruction.

#include "ddp/launcher/watch/file_timer.h"

#include <functional>
#include <string>
#include <sys/types.h>

namespace ddp::launcher {

// The run directory's pipe name.
inline constexpr const char* kTimerPipeName = "watchdog_timer";

class FileTimerServer {
 public:
  static constexpr size_t kMaxScopes = 4096;
  static constexpr size_t kMaxReadBytes = 1 << 20;

  // Throws std::runtime_error naming the path and what to do.
  explicit FileTimerServer(std::string path);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return rd_; }

  // Reads what the pipe holds now (never blocks) and applies each request as
  // received at `now` (wall-clock seconds); an acquire is kept only when
  // accept(pid) says the launcher may signal that pid. Returns a warning line
  // for the first line refused in this run, "" otherwise.
  std::string read(double now, const std::function<bool(pid_t)>& accept);
  // Milliseconds from `now` to the nearest expiry, rounded up, at most a
  // day; -1 when no scope is held.
  int ms_to_next_expiry(double now) const;
  TimerTable& table() { return table_; }

 private:
  std::string refuse(const std::string& why);

  std::string path_;
  int rd_ = -1;
  int wr_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  LineSplitter lines_;
  TimerTable table_;
  bool warned_ = false;
};

// Wall-clock seconds, as Python's time.time() of the clients.
double wall_seconds();

}  // namespace ddp::launcher
