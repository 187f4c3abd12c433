#pragma once
// Each worker's stderr through the launcher when it goes to the console or
// nowhere (no --tee/--redirects for it), so the launcher sees every byte (a
// tail for the failure report: output_tail.h, stderr_failure.h) while the
// worker's view stays what it was:
//  - the launcher's stderr is a terminal: the worker gets a pseudo-terminal
//    of its own (isatty(2) stays true; tqdm, colours, rich behave as
//    before). Its termios are the terminal's with output processing off
//    (OPOST), so the bytes reach the real terminal unchanged and are
//    processed there once ("\n" -> "\r\n"), as when the worker wrote to it;
//    its window size is the terminal's, and follows it on SIGWINCH (read
//    here from a signalfd of our own; the slave is no one's controlling
//    terminal, so the worker is not signalled, as it was not before: it
//    never was the terminal's foreground group);
//  - otherwise (a pipe, a file, /dev/null) a pipe: a non-terminal stays a
//    non-terminal (a worker that fstat()s a file on fd 2 sees a FIFO now);
//  - a rank outside --local_ranks_filter (nowhere): a pipe whose bytes are
//    only kept, never written.
// What arrives is written at once and raw (no line buffering: '\r'
// progress and partial lines show as they come) to the launcher's stderr,
// then handed to the sink (the tail; where the stall watch notes output).
// Reads are never blocking; the supervisor polls fds() in its one loop,
// pump()s whenever it wakes, and finish()es after the groups are gone,
// reading what is left (a pty master returns the rest, then EIO, once every
// slave fd is closed). A console that went away (EPIPE) stops the console
// copy, never the draining. No pipe or pty (EMFILE, no /dev/ptmx): add()
// returns -1 and that worker keeps the launcher's stderr itself, without a
// tail (take_warning() says so once).
// If the launcher is SIGKILLed, the read ends go with it: workers die of
// their death signal (spawn.h) at once, and a descendant that writes to its
// inherited stderr then gets SIGPIPE/EPIPE (pipe) or EIO (pty) until the
// watchdog kills its group (watchdog.h); bytes still in a pipe then never
// reach the console.

#include <csignal>
#include <cstddef>
#include <poll.h>
#include <functional>
#include <string>
#include <vector>

namespace ddp::launcher {

class StderrRelay {
 public:
  using Sink = std::function<void(int local_rank, const char* data, size_t n)>;

  explicit StderrRelay(Sink sink);  // blocks SIGPIPE (and SIGWINCH once a pty is made)
  ~StderrRelay();                   // closes every fd, unblocks what it blocked
  StderrRelay(const StderrRelay&) = delete;
  StderrRelay& operator=(const StderrRelay&) = delete;

  // A worker's stderr. console_fd: 2 (the launcher's stderr; a pty when it
  // is a terminal) or -1 (only kept). Returns the fd for the worker's fd 2
  // (close-on-exec; the caller closes it once the worker runs), -1 when none
  // could be made.
  int add(int local_rank, int console_fd);

  std::vector<int> fds() const;  // read ends still open and the SIGWINCH signalfd, for the caller's poll
  // Reads the streams that `polled` (fds() as polled just now, in its
  // order) marks ready, never blocks; follows a window-size change. Only
  // those: with thousands of workers a wake must not read every stream.
  void pump(const struct pollfd* polled, size_t n);
  void finish();                 // the writers are gone: reads what is left, closes everything

  std::string take_warning();    // a relay that could not be made, once ("" when none)

 private:
  struct Stream {
    int local_rank = 0;
    int read_fd = -1;
    int console_fd = -1;
    bool pty = false;
  };
  int make_pty(int console_fd, int& master);
  void read_stream(Stream& s, bool at_end);
  void to_console(int fd, const char* data, size_t n);
  void follow_window_size();
  static void close_fd(int& fd);

  Sink sink_;
  std::vector<Stream> streams_;
  int winch_fd_ = -1;
  bool console_gone_ = false;
  int console_is_tty_ = -1;  // -1: not asked yet
  bool blocked_pipe_ = false, blocked_winch_ = false;
  std::string warning_;
  bool warned_ = false;
};


}  // namespace ddp::launcher
