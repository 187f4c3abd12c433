#pragma once
// torchrun's --tee without its threads: each tee'd stream of a worker is a
// pipe whose read end the launcher polls in its one event loop (the
// supervisor adds fds() to its poll). Whatever arrives is written unchanged
// to the stream's log file, and to the launcher's own stdout or stderr as
// whole lines, each with the worker's prefix ("[default0]:"), in one write:
//  - lines of different workers never mix inside a line (the launcher is
//    the only writer of tee'd lines);
//  - a line longer than a pipe buffer is gathered until its newline (up to
//    kMaxLine; a longer one goes out in kMaxLine pieces, each prefixed);
//  - a last line without a newline gets one on the console when its stream
//    ends (the file keeps the bytes exactly);
//  - a line still open whose text has a '\r' (a progress bar redrawn in
//    place) is forwarded up to its last '\r', each piece prefixed and ending
//    in '\r', so a bar moves live, one redraw behind (a pause without a
//    '\r' still waits for the newline);
//  - on a console that is a terminal, a line still open when its stream
//    pauses (kPause without a byte: a prompt, a bar without '\r', the
//    latest redraw) is shown too, prefixed and ending in '\r': the next
//    piece on that console starts where it started, and the whole line
//    overwrites it when its newline comes. A file or a pipe (a Slurm
//    output, `| tee`) keeps whole lines, without the extra pieces;
//  - bytes are never interpreted (binary junk passes through): only '\n'
//    splits lines, and '\r' starts a piece that gets the prefix again.
// --duplicate_stdout_filters/--duplicate_stderr_filters (torchrun 2.x): the
// prefixed console lines of one console fd that contain any filter string
// are also written to one file for all ranks (filtered_stdout.log), whole
// lines in one write each, as on the console.
// A console that went away (EPIPE: `ddp-launch ... | head`) stops the
// console copy, never the draining of the pipes, the files or the job. The
// launcher ignores SIGPIPE from its start (main.cpp); the tee also blocks it
// while alive, so it holds in a program that does not (workers get their
// original mask and SIGPIPE's default action back at exec).
// Exists only when some stream is tee'd: a plain launch has no pipes.

#include <chrono>
#include <cstddef>
#include <optional>
#include <csignal>
#include <functional>
#include <string>
#include <vector>

namespace ddp::launcher {

class OutputTee {
 public:
  static constexpr size_t kMaxLine = 1 << 20;
  using Clock = std::chrono::steady_clock;
  // How long a stream is quiet before its open line is shown on a terminal.
  static constexpr std::chrono::milliseconds kPause{200};
  // Sees every byte a stream's worker wrote, as read (the stderr tail of the
  // failure report: output_tail.h).
  using Observer = std::function<void(const char* data, size_t n)>;

  OutputTee();   // blocks SIGPIPE in the launcher
  ~OutputTee();  // drains nothing; closes every fd; restores the mask
  OutputTee(const OutputTee&) = delete;
  OutputTee& operator=(const OutputTee&) = delete;

  // A new tee'd stream: file_fd (taken over; its path for messages) gets
  // the raw bytes, console_fd (1 or 2, not owned) the prefixed lines.
  // Returns the pipe's write end for the worker (close-on-exec; the caller
  // closes it once the worker runs). Throws std::runtime_error when a pipe
  // cannot be made. on_bytes, when given, sees the raw bytes too.
  int add(int file_fd, const std::string& path, int console_fd, const std::string& prefix, Observer on_bytes = {});

  // Open lines are shown after a pause on console_fd even when it is not a
  // terminal (tests; add() asks isatty).
  void show_pauses_on(int console_fd);
  // When the next open line's pause ends (nullopt: none to show).
  std::optional<Clock::time_point> pause_due() const;
  // Shows the open lines whose streams have been quiet for kPause at `now`.
  void show_paused(Clock::time_point now);

  // Lines for console_fd (1 or 2) that contain any of `filters` also go to
  // file_fd (taken over; its path for messages).
  void duplicate(int console_fd, int file_fd, const std::string& path, std::vector<std::string> filters);

  // Read ends still open, for the caller's poll.
  std::vector<int> fds() const;
  // Reads whatever is ready on every stream (never blocks).
  void pump();
  // The writers are gone: reads what is left, ends every stream's last line,
  // closes everything. Never waits for a writer that is still alive.
  void finish();

  // A file that could not be written, once per file ("" when none).
  std::string take_warning();

 private:
  struct Stream {
    int read_fd = -1;
    int file_fd = -1;
    int console_fd = -1;
    std::string path;
    std::string prefix;
    std::string partial;  // bytes after the last newline
    bool live = false;     // console_fd is a terminal: show open lines after a pause
    size_t shown = 0;      // bytes of partial already shown after a pause
    Clock::time_point last_read{};
    bool open_line_unshown() const { return live && read_fd >= 0 && console_fd >= 0 && partial.size() > shown; }
    bool file_failed = false;
    Observer on_bytes;
  };
  struct Duplicate {
    int console_fd = -1;
    int file_fd = -1;
    std::string path;
    std::vector<std::string> filters;
    bool failed = false;
  };
  void read_stream(Stream& s, bool at_end);
  Duplicate* duplicate_for(int console_fd);
  // Copies the lines of `lines` (prefixed, each ending in '\n') that match
  // to d's file; body_starts: where each line's text begins after its prefix.
  void to_duplicate(Duplicate* d, const std::string& lines, const std::vector<size_t>& line_starts,
                    const std::vector<size_t>& body_starts);
  bool write_all(int fd, const char* data, size_t n);
  void flush_partial(Stream& s);
  void close_stream(Stream& s);
  void to_console(int fd, const std::string& text);
  void to_file(Stream& s, const char* data, size_t n);

  std::vector<Stream> streams_;
  std::vector<Duplicate> duplicates_;
  std::vector<int> console_gone_;  // console fds that returned EPIPE
  std::string warning_;
  sigset_t old_mask_;
};

}  // namespace ddp::launcher
