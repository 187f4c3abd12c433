#include "ddp/common/untrusted_text.h"

namespace ddp {
namespace {

bool continuation(std::string_view s, std::size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
  if (i >= s.size()) return false;
  const auto c = static_cast<unsigned char>(s[i]);
  return c >= lo && c <= hi;
}

void append_hex_byte(std::string& out, unsigned char b) {
  static const char* digits = "0123456789abcdef";
  out += "\\x";
  out += digits[b >> 4];
  out += digits[b & 0xF];
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return continuation(s, i + 1) ? 2 : 0;
  if (b >= 0xE0 && b <= 0xEF) {
    // E0: no overlong forms (A0..); ED: no surrogates (..9F).
    const unsigned char lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    return continuation(s, i + 1, lo, hi) && continuation(s, i + 2) ? 3 : 0;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    // F0: no overlong forms (90..); F4: nothing past U+10FFFF (..8F).
    const unsigned char lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    return continuation(s, i + 1, lo, hi) && continuation(s, i + 2) && continuation(s, i + 3) ? 4 : 0;
  }
  return 0;  // a continuation byte alone, C0/C1 (overlong), F5..FF
}

std::string valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t n = utf8_sequence_length(bytes, i);
    if (n == 0) {
      append_hex_byte(out, static_cast<unsigned char>(bytes[i]));
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string visible_text(std::string_view bytes, Newlines newlines) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    const std::size_t n = utf8_sequence_length(bytes, i);
    const bool control = n == 1 && (b < 0x20 || b == 0x7F) && b != '\t' && !(b == '\n' && newlines == Newlines::Keep);
    const bool c1 = n == 2 && b == 0xC2 && static_cast<unsigned char>(bytes[i + 1]) <= 0x9F;
    if (n == 0 || control || c1) {
      const std::size_t len = n == 0 ? 1 : n;
      for (std::size_t k = 0; k < len; ++k) append_hex_byte(out, static_cast<unsigned char>(bytes[i + k]));
      i += len;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace ddp
