#include "ddp/launcher/diagnose/stderr_failure.h"

#include <cctype>
#include <vector>

namespace ddp::launcher {

namespace {

constexpr std::string_view kPyHeader = "Traceback (most recent call last):";
constexpr std::string_view kTerminate = "terminate called ";
constexpr std::string_view kThrowing = "terminate called after throwing an instance of '";
// Python's two ways of printing a chain (traceback.py, _cause_message and _context_message).
constexpr std::string_view kCause = "The above exception was the direct cause of the following exception:";
constexpr std::string_view kContext = "During handling of the above exception, another exception occurred:";

// ESC [ ... final byte (CSI: colours, cursor moves) and two-byte ESC x.
std::string without_escapes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\033') {
      out += s[i];
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '[') {
      size_t j = i + 2;
      while (j < s.size() && !(s[j] >= 0x40 && s[j] <= 0x7e)) ++j;
      i = j;
    } else {
      ++i;
    }
  }
  return out;
}

// torch 2.x's sys.excepthook, set by init_process_group, writes every
// non-empty line of a traceback as "[rank<N>]: <line>" (distributed_c10d.py,
// _distributed_excepthook): that prefix is left out where a line starts
// (after '\n', '\r' or at the start), so the traceback reads as Python's own.
std::string without_rank_prefixes(std::string_view s) {
  constexpr std::string_view kOpen = "[rank";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const bool line_start = i == 0 || s[i - 1] == '\n' || s[i - 1] == '\r';
    if (line_start && s.substr(i, kOpen.size()) == kOpen) {
      size_t j = i + kOpen.size();
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j > i + kOpen.size() && s.substr(j, 3) == "]: ") {
        i = j + 3;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

std::vector<std::string_view> lines_of(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string_view::npos) nl = s.size();
    std::string_view line = s.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back(line);
    start = nl + 1;
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// "ValueError: bad batch", "KeyboardInterrupt", "torch.distributed.DistStoreError: ...":
// a dotted name whose last part is CapWords (Python's exception classes),
// alone or followed by ": ".
bool is_exception_line(std::string_view l) {
  size_t i = 0;
  size_t last_part = 0;
  for (;;) {
    if (i >= l.size() || !ident_start(l[i])) return false;
    last_part = i;
    while (i < l.size() && ident(l[i])) ++i;
    if (i < l.size() && l[i] == '.') {
      ++i;
      continue;
    }
    break;
  }
  if (!std::isupper(static_cast<unsigned char>(l[last_part]))) return false;
  return i == l.size() || (l[i] == ':' && (i + 1 == l.size() || l[i + 1] == ' '));
}

std::string join(const std::vector<std::string_view>& lines) {
  std::string out;
  for (std::string_view l : lines) {
    if (!out.empty()) out += '\n';
    out += l;
  }
  return out;
}

// The Python traceback whose header starts at `at` in `text`.
std::optional<StderrFailure> python_failure(std::string_view text, size_t at, int max_frames) {
  const std::vector<std::string_view> lines = lines_of(text.substr(at + kPyHeader.size()));
  std::vector<std::vector<std::string_view>> frames;
  std::string_view exception;
  for (size_t i = 1; i < lines.size() && exception.empty(); ++i) {  // [0]: the rest of the header line
    const std::string_view l = lines[i];
    if (starts_with(l, "  File \"")) frames.push_back({l});
    else if (!frames.empty() && (starts_with(l, "    ") || starts_with(l, "  [Previous line repeated")))
      frames.back().push_back(l);
    else if (is_exception_line(l)) exception = l;
    // else: another writer's line between the traceback's lines
  }
  if (exception.empty()) return std::nullopt;
  StderrFailure f;
  f.message = std::string(exception);
  std::vector<std::string_view> shown;
  const size_t first = frames.size() > static_cast<size_t>(max_frames) ? frames.size() - max_frames : 0;
  std::string earlier;
  if (first > 0) earlier = "  ... " + std::to_string(first) + " earlier frame" + (first == 1 ? "" : "s");
  if (!earlier.empty()) shown.push_back(earlier);
  for (size_t i = first; i < frames.size(); ++i) shown.insert(shown.end(), frames[i].begin(), frames[i].end());
  shown.push_back(exception);
  f.traceback = join(shown);
  // A chain: the separator right before this header names the exception it was raised from or while handling.
  std::string_view before = text.substr(0, at);
  while (!before.empty() && std::isspace(static_cast<unsigned char>(before.back()))) before.remove_suffix(1);
  for (const auto& [sep, how] : {std::pair{kContext, "raised while handling: "}, std::pair{kCause, "raised from: "}}) {
    if (before.size() < sep.size() || before.substr(before.size() - sep.size()) != sep) continue;
    const std::string_view earlier_text = before.substr(0, before.size() - sep.size());
    const size_t prev = earlier_text.rfind(kPyHeader);
    if (prev == std::string_view::npos) break;
    if (auto p = python_failure(earlier_text, prev, max_frames))
      f.traceback = "(" + std::string(how) + p->message + ")\n" + f.traceback;
    break;
  }
  return f;
}

// libstdc++'s verbose terminate handler starting at `at`.
StderrFailure terminate_failure(std::string_view text, size_t at) {
  const std::vector<std::string_view> lines = lines_of(text.substr(at));
  StderrFailure f;
  const std::string_view head = lines[0];
  f.message = std::string(head);
  std::vector<std::string_view> shown{head};
  if (starts_with(head, kThrowing)) {
    std::string_view type = head.substr(kThrowing.size());
    if (const size_t q = type.rfind('\''); q != std::string_view::npos) type = type.substr(0, q);
    f.message = "uncaught C++ exception of type " + std::string(type);
    // "  what():  text" follows at once, its text possibly over several lines.
    for (size_t i = 1; i < lines.size() && i <= 4; ++i) {
      const size_t w = lines[i].find("what():");
      if (w == std::string_view::npos) continue;
      std::string_view what = lines[i].substr(w + 7);
      while (!what.empty() && what.front() == ' ') what.remove_prefix(1);
      f.message = std::string(type) + ": " + std::string(what);
      shown.push_back(lines[i]);
      for (size_t j = i + 1; j < lines.size() && shown.size() < 12; ++j) {
        if (!starts_with(lines[j], "Exception raised from") && !starts_with(lines[j], "frame #")) break;
        shown.push_back(lines[j]);
      }
      break;
    }
  }
  f.traceback = join(shown);
  return f;
}

}  // namespace

std::optional<StderrFailure> failure_from_stderr(std::string_view raw, int max_frames) {
  const std::string text = without_rank_prefixes(without_escapes(raw));
  const std::string_view t = text;
  size_t py = t.rfind(kPyHeader);
  // A terminate line starts a line (the handler writes it whole).
  size_t cxx = t.rfind(kTerminate);
  while (cxx != std::string_view::npos && cxx > 0 && t[cxx - 1] != '\n' && t[cxx - 1] != '\r')
    cxx = cxx == 0 ? std::string_view::npos : t.rfind(kTerminate, cxx - 1);
  // The later one. A Python traceback that never got to its exception line
  // (killed while printing it, or mangled by another writer inside its
  // lines) gives way only to the one it was chained to, which is the same
  // failure's: an earlier, unrelated traceback (a logged one) is never quoted.
  if (cxx != std::string_view::npos && (py == std::string_view::npos || cxx > py)) return terminate_failure(t, cxx);
  while (py != std::string_view::npos) {
    if (auto f = python_failure(t, py, max_frames)) return f;
    std::string_view before = t.substr(0, py);
    while (!before.empty() && std::isspace(static_cast<unsigned char>(before.back()))) before.remove_suffix(1);
    const bool chained = (before.size() >= kCause.size() && before.substr(before.size() - kCause.size()) == kCause) ||
                         (before.size() >= kContext.size() && before.substr(before.size() - kContext.size()) == kContext);
    if (!chained) break;
    py = t.rfind(kPyHeader, before.size());
  }
  return std::nullopt;
}

}  // namespace ddp::launcher
