#include "ddp/launcher/output/output_tee.h"

#include "ddp/common/fd_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <stdexcept>
#include <string_view>
#include <unistd.h>

namespace ddp::launcher {

namespace {

// One read's worth; a stream that keeps writing yields after this many
// reads so the event loop still sees signals and exits.
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kReadsPerPump = 16;
// At the end, what is left is read to EOF; a writer that escaped the
// teardown (setsid) and keeps writing is cut off after this much.
constexpr int kReadsAtEnd = 4096;

void drain_sigpipe() {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  const timespec zero{0, 0};
  while (::sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
}

}  // namespace

OutputTee::OutputTee() {
  sigset_t pipe_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask_);
}

OutputTee::~OutputTee() {
  for (Stream& s : streams_) close_stream(s);
  for (Duplicate& d : duplicates_)
    if (d.file_fd >= 0) ::close(d.file_fd);
  drain_sigpipe();  // a pending one would kill the launcher once unblocked
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

int OutputTee::add(int file_fd, const std::string& path, int console_fd, const std::string& prefix,
                   Observer on_bytes) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(file_fd);
    throw std::runtime_error(std::string("cannot make a pipe for --tee: ") + std::strerror(e));
  }
  // Only our end is non-blocking: the worker's stdout must block as usual.
  ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
  Stream s;
  s.read_fd = p[0];
  s.file_fd = file_fd;
  s.console_fd = console_fd;
  s.path = path;
  s.prefix = prefix;
  s.on_bytes = std::move(on_bytes);
  s.live = console_fd >= 0 && ::isatty(console_fd) == 1;
  streams_.push_back(std::move(s));
  return p[1];
}

std::vector<int> OutputTee::fds() const {
  std::vector<int> out;
  for (const Stream& s : streams_)
    if (s.read_fd >= 0) out.push_back(s.read_fd);
  return out;
}

void OutputTee::show_pauses_on(int console_fd) {
  for (Stream& s : streams_)
    if (s.console_fd == console_fd) s.live = true;
}

std::optional<OutputTee::Clock::time_point> OutputTee::pause_due() const {
  std::optional<Clock::time_point> due;
  for (const Stream& s : streams_)
    if (s.open_line_unshown() && (!due || s.last_read + kPause < *due)) due = s.last_read + kPause;
  return due;
}

void OutputTee::show_paused(Clock::time_point now) {
  for (Stream& s : streams_) {
    if (!s.open_line_unshown() || now < s.last_read + kPause) continue;
    // Not whole yet: ends in '\r', so the line that completes it, or the
    // next piece of any rank, starts over it. Never to the filters' file.
    to_console(s.console_fd, s.prefix + s.partial + "\r");
    s.shown = s.partial.size();
  }
}

void OutputTee::pump() {
  for (Stream& s : streams_)
    if (s.read_fd >= 0) read_stream(s, false);
}

void OutputTee::finish() {
  for (Stream& s : streams_) {
    if (s.read_fd >= 0) read_stream(s, true);
    flush_partial(s);
    close_stream(s);
  }
}

std::string OutputTee::take_warning() {
  std::string w;
  w.swap(warning_);
  return w;
}

namespace {

// `text` with `prefix` before each piece that ends in '\r' (or is the last),
// so a line redrawn in place keeps its prefix. The first piece gets none
// when the caller wrote it already (`prefixed_first`). A piece that is only
// '\r' or '\n' (a leading '\r', a CRLF's "\r\n") gets no prefix: in a whole
// line its byte stays, in a redraw it is left out (the cursor is at the
// start of the line already).
std::string redrawn(const std::string& prefix, const std::string& text, bool prefixed_first) {
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t cr = text.find('\r', at);
    const size_t stop = cr == std::string::npos ? text.size() : cr + 1;
    const std::string_view piece(text.data() + at, stop - at);
    const bool empty = piece == "\r" || piece == "\n";
    if (!empty && !(at == 0 && prefixed_first)) out += prefix;
    if (!empty || prefixed_first) out += piece;
    at = stop;
  }
  return out;
}

}  // namespace

void OutputTee::read_stream(Stream& s, bool at_end) {
  static thread_local std::vector<char> buf(kReadChunk);
  for (int reads = 0; reads < (at_end ? kReadsAtEnd : kReadsPerPump); ++reads) {
    const ssize_t n = ddp::fd::read_some(s.read_fd, buf.data(), buf.size());
    if (n < 0) return;  // EAGAIN: nothing more for now (or a writer still alive at the end)
    if (n == 0) {       // every writer closed it
      flush_partial(s);
      close_stream(s);
      return;
    }
    to_file(s, buf.data(), static_cast<size_t>(n));
    s.last_read = Clock::now();
    if (s.on_bytes) s.on_bytes(buf.data(), static_cast<size_t>(n));
    if (s.console_fd < 0) continue;
    // Whole lines go out together, each with the prefix, in one write.
    Duplicate* dup = duplicate_for(s.console_fd);
    std::string out;
    std::vector<size_t> line_starts, body_starts;  // only with a duplicate
    auto begin_line = [&] {
      if (dup) line_starts.push_back(out.size());
      out += s.prefix;
      if (dup) body_starts.push_back(out.size());
    };
    const char* p = buf.data();
    const char* end = p + n;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (!nl) {
        s.partial.append(p, end);
        break;
      }
      begin_line();
      if (s.partial.find('\r') == std::string::npos && !std::memchr(p, '\r', static_cast<size_t>(nl - p))) {
        out += s.partial;
        out.append(p, nl + 1);
      } else {
        out += redrawn(s.prefix, s.partial + std::string(p, nl + 1), true);
      }
      s.partial.clear();
      s.shown = 0;
      p = nl + 1;
    }
    // A redraw (a progress bar's "\r"): what is up to its last '\r' goes out
    // now, each piece between '\r's with the prefix and ending in '\r', so
    // the bar moves on the console as it would without the tee (one redraw
    // behind: a piece is whole once the next '\r' comes). Not to the
    // duplicate filters' file, which takes whole lines.
    if (const size_t cr = s.partial.rfind('\r'); cr != std::string::npos) {
      if (!out.empty()) to_console(s.console_fd, out);  // the whole lines first, in order
      if (dup && !out.empty()) to_duplicate(dup, out, line_starts, body_starts);
      out.clear();
      line_starts.clear();
      body_starts.clear();
      const std::string redraw = redrawn(s.prefix, s.partial.substr(0, cr + 1), false);
      s.partial.erase(0, cr + 1);
      s.shown = 0;
      if (!redraw.empty()) to_console(s.console_fd, redraw);
    }
    while (s.partial.size() >= kMaxLine) {  // no newline in sight: pieces of kMaxLine
      begin_line();
      out.append(s.partial, 0, kMaxLine);
      out += '\n';
      s.partial.erase(0, kMaxLine);
      s.shown = 0;
    }
    if (!out.empty()) to_console(s.console_fd, out);
    if (dup && !out.empty()) to_duplicate(dup, out, line_starts, body_starts);
  }
}

void OutputTee::flush_partial(Stream& s) {
  if (s.partial.empty() || s.console_fd < 0) return;
  const std::string line = s.prefix + s.partial + "\n";
  to_console(s.console_fd, line);
  if (Duplicate* dup = duplicate_for(s.console_fd)) to_duplicate(dup, line, {0}, {s.prefix.size()});
  s.partial.clear();
  s.shown = 0;
}

void OutputTee::duplicate(int console_fd, int file_fd, const std::string& path, std::vector<std::string> filters) {
  Duplicate d;
  d.console_fd = console_fd;
  d.file_fd = file_fd;
  d.path = path;
  d.filters = std::move(filters);
  duplicates_.push_back(std::move(d));
}

OutputTee::Duplicate* OutputTee::duplicate_for(int console_fd) {
  for (Duplicate& d : duplicates_)
    if (d.console_fd == console_fd && !d.failed) return &d;
  return nullptr;
}

void OutputTee::to_duplicate(Duplicate* d, const std::string& lines, const std::vector<size_t>& line_starts,
                             const std::vector<size_t>& body_starts) {
  std::string copy;
  for (size_t i = 0; i < line_starts.size(); ++i) {
    const size_t next = i + 1 < line_starts.size() ? line_starts[i + 1] : lines.size();
    // Matched against the worker's line, not the prefix (as torchrun's filter sees it).
    const std::string_view body(lines.data() + body_starts[i], next - body_starts[i]);
    for (const std::string& f : d->filters)
      if (body.find(f) != std::string_view::npos) {
        copy.append(lines, line_starts[i], next - line_starts[i]);
        break;
      }
  }
  if (copy.empty() || write_all(d->file_fd, copy.data(), copy.size())) return;
  d->failed = true;
  warning_ += std::string(warning_.empty() ? "" : "\n") + "ddp-launch: warning: cannot write " + d->path + ": " +
              std::strerror(errno) + "; the console and the other log files go on";
}

bool OutputTee::write_all(int fd, const char* data, size_t n) {
  const ddp::fd::Moved m = ddp::fd::write_all(fd, data, n);
  if (m.bytes == n) return true;
  errno = m.error != 0 ? m.error : EIO;
  return false;
}

void OutputTee::close_stream(Stream& s) {
  if (s.read_fd >= 0) ::close(s.read_fd);
  if (s.file_fd >= 0) ::close(s.file_fd);
  s.read_fd = s.file_fd = -1;
}

void OutputTee::to_console(int fd, const std::string& text) {
  if (std::find(console_gone_.begin(), console_gone_.end(), fd) != console_gone_.end()) return;
  // A console someone made non-blocking: wait until it takes more.
  if (ddp::fd::write_all(fd, text, ddp::fd::WhenFull::wait).bytes == text.size()) return;
  // EPIPE (the reader went away) or a broken console: files keep going.
  drain_sigpipe();
  console_gone_.push_back(fd);
}

void OutputTee::to_file(Stream& s, const char* data, size_t n) {
  if (s.file_failed) return;
  const ddp::fd::Moved m = ddp::fd::write_all(s.file_fd, data, n);
  if (m.bytes == n) return;
  s.file_failed = true;
  warning_ += std::string(warning_.empty() ? "" : "\n") + "ddp-launch: warning: cannot write " + s.path + ": " +
              (m.error != 0 ? std::strerror(m.error) : "no progress") + "; its console copy goes on";
}

}  // namespace ddp::launcher
