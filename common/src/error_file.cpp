#include "ddp/common/error_file.h"

#include "ddp/common/atomic_file.h"
#include "ddp/common/fd_io.h"
#include "ddp/common/untrusted_text.h"

#include "ddp/common/ptree_json.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace ddp {
namespace pt = boost::property_tree;

namespace {

// Boost's JSON parser recurses once per '[' or '{': 100000 of them overflow
// the stack (found by tests/fuzz/fuzz_error_file). torchelastic's format
// nests 3 deep; anything past this is not an error file.
constexpr int kMaxJsonDepth = 64;

bool nested_deeper_than(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // skip the escaped character
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

const char* const kHex = "0123456789abcdef";

void append_hex2(std::string& out, unsigned v) {
  out += kHex[(v >> 4) & 0xF];
  out += kHex[v & 0xF];
}

bool hex4(const std::string& t, size_t at, unsigned& v) {
  if (at + 4 > t.size()) return false;
  v = 0;
  for (size_t k = at; k < at + 4; ++k) {
    const char c = t[k];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) return false;
    v = v * 16 + static_cast<unsigned>(d);
  }
  return true;
}

// Another writer's error file as Boost's strict parser takes it: inside
// strings only, a byte outside valid UTF-8 becomes the text \xNN (as
// valid_utf8 writes it), a raw control character its \u00NN escape, and a
// lone UTF-16 surrogate escape (Python's json.dump of a str holding
// surrogateescape'd bytes: "caf\udce9") the byte it stands for (\udc80 to
// \udcff) or U+FFFD. One bad byte in a message then no longer costs the
// whole file. Outside strings nothing changes: what is not JSON stays so.
std::string lenient_json(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (!in_string || c == '"') {
      if (c == '"') in_string = !in_string;
      out += c;
      ++i;
      continue;
    }
    if (c == '\\') {
      unsigned u = 0;
      if (i + 1 < text.size() && text[i + 1] == 'u' && hex4(text, i + 2, u) && u >= 0xD800 && u <= 0xDFFF) {
        unsigned low = 0;
        const bool pair = u <= 0xDBFF && i + 12 <= text.size() && text.compare(i + 6, 2, "\\u") == 0 &&
                          hex4(text, i + 8, low) && low >= 0xDC00 && low <= 0xDFFF;
        if (pair) {
          out.append(text, i, 12);  // a proper pair
          i += 12;
          continue;
        }
        if (u >= 0xDC80 && u <= 0xDCFF) {
          out += "\\\\x";
          append_hex2(out, u & 0xFF);
        } else {
          out += "\\ufffd";
        }
        i += 6;
        continue;
      }
      out.append(text, i, std::min<size_t>(2, text.size() - i));  // any other escape, as it is
      i += 2;
      continue;
    }
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20) {
      out += "\\u00";
      append_hex2(out, b);
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) {
      out += "\\\\x";
      append_hex2(out, b);
      ++i;
      continue;
    }
    out.append(text, i, n);
    i += n;
  }
  return out;
}

}  // namespace

void write_error_file(const std::string& path, const ErrorRecord& rec) {
  pt::ptree extra;
  // Boost writes bytes >= 0x80 as they are: one that is not UTF-8 (a path
  // given as $'caf\xe9') would make the file invalid JSON for every reader.
  extra.put("py_callstack", valid_utf8(rec.callstack));
  extra.put("timestamp", std::to_string(rec.timestamp));
  if (rec.follows_rank) extra.put("follows_rank", std::to_string(*rec.follows_rank));
  pt::ptree msg;
  msg.put("message", valid_utf8(rec.message));
  msg.add_child("extraInfo", extra);
  if (rec.error_code) msg.put("errorCode", *rec.error_code);
  pt::ptree root;
  root.add_child("message", msg);

  std::ostringstream out;
  pt::write_json(out, root, /*pretty=*/false);
  try {
    write_file_atomically(path, out.str(), 0600);
  } catch (const AtomicWriteError& e) {
    throw std::runtime_error("cannot write error file " + path + ": " + e.what());
  }
}

namespace {

ErrorRecord problem(const std::string& text) { return ErrorRecord{"(" + text + ")", "", 0, std::nullopt, std::nullopt}; }

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

std::string not_regular(const std::string& path, mode_t mode) {
  return "error file " + path + " is not a regular file (" + file_kind(mode) + "); not read";
}

// The first bytes of a file too large to parse, printable ASCII only.
std::string printable_start(const std::string& bytes) {
  constexpr size_t kShown = 200;
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  return out + (bytes.size() > kShown ? "..." : "");
}

}  // namespace

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::nullopt;
    return problem("error file " + path + " exists but cannot be read: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return problem(not_regular(path, st.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    return problem("error file " + path + " exists but cannot be read: " + std::strerror(errno));
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // swapped after the stat
    const mode_t mode = st.st_mode;
    ::close(fd);
    return problem(not_regular(path, mode));
  }
  // One byte more than the limit tells a file at the limit from a larger
  // one (it may grow while we read: the size is only a hint).
  std::string text(kMaxErrorFileBytes + 1, '\0');
  const ddp::fd::Moved in = ddp::fd::read_full(fd, text.data(), text.size());
  const size_t got = in.bytes;
  const int read_errno = in.error;
  ::close(fd);
  text.resize(got);
  if (read_errno != 0) return problem("error file " + path + " exists but cannot be read: " + std::strerror(read_errno));
  if (got > kMaxErrorFileBytes)
    return problem("error file " + path + " is " + std::to_string(std::max<off_t>(st.st_size, static_cast<off_t>(got))) +
                   " bytes; the launcher reads at most " + std::to_string(kMaxErrorFileBytes >> 20) +
                   " MiB of an error file: look at the file itself; it begins: " + printable_start(text));
  if (nested_deeper_than(text, kMaxJsonDepth))
    return problem("error file " + path + " is not a torchelastic error file: JSON nested deeper than " +
                   std::to_string(kMaxJsonDepth) + " levels");
  pt::ptree root;
  try {
    std::istringstream json(lenient_json(text));
    pt::read_json(json, root);
  } catch (const pt::json_parser_error& e) {
    return ErrorRecord{"(error file " + path + " is not valid JSON: " + e.message() + ")", "",
                       0, std::nullopt, std::nullopt};
  }
  ErrorRecord rec;
  auto msg = root.get_child_optional("message");
  if (!msg) {
    rec.message = "(error file " + path + " has no \"message\" field)";
    return rec;
  }
  if (msg->empty()) {  // a plain string
    rec.message = msg->data();
    return rec;
  }
  rec.message = msg->get<std::string>("message", "");
  rec.callstack = msg->get<std::string>("extraInfo.py_callstack", "");
  try {
    rec.timestamp = std::stoll(msg->get<std::string>("extraInfo.timestamp", "0"));
  } catch (const std::exception&) {
    rec.timestamp = 0;
  }
  if (auto code = msg->get_optional<int>("errorCode")) rec.error_code = *code;
  if (auto follows = msg->get_optional<int>("extraInfo.follows_rank")) rec.follows_rank = *follows;
  return rec;
}

}  // namespace ddp
