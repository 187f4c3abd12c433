#include "ddp/common/json_writer.h"

#include <stdexcept>

namespace ddp::json {

namespace {

// One code point from UTF-8 at s[i]; advances i. Invalid bytes give U+FFFD
// (Python's errors="replace" when it read the bytes).
unsigned next_code_point(std::string_view s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + static_cast<size_t>(len) > s.size()) {
    ++i;
    return 0xFFFD;
  }
  unsigned cp = len == 1 ? b : b & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((c >> 6) != 2) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  i += static_cast<size_t>(len);
  return cp;
}

void u_escape(std::string& out, unsigned v) {
  static const char* hex = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex[(v >> shift) & 0xF];
}

// The escapes both of Python's modes share; false for a character that is not one.
bool short_escape(std::string& out, unsigned c) {
  switch (c) {
    case '"': out += "\\\""; return true;
    case '\\': out += "\\\\"; return true;
    case '\n': out += "\\n"; return true;
    case '\r': out += "\\r"; return true;
    case '\t': out += "\\t"; return true;
    case '\b': out += "\\b"; return true;
    case '\f': out += "\\f"; return true;
    default:
      if (c < 0x20) {
        u_escape(out, c);
        return true;
      }
      return false;
  }
}

}  // namespace

void append_quoted(std::string& out, std::string_view s, Ascii mode) {
  out += '"';
  if (mode == Ascii::utf8) {
    for (const char ch : s)
      if (!short_escape(out, static_cast<unsigned char>(ch))) out += ch;
  } else {
    for (size_t i = 0; i < s.size();) {
      const unsigned cp = next_code_point(s, i);
      if (short_escape(out, cp)) continue;
      if (cp < 0x7F) {
        out += static_cast<char>(cp);
      } else if (cp < 0x10000) {
        u_escape(out, cp);
      } else {  // a surrogate pair, as Python writes it
        const unsigned v = cp - 0x10000;
        u_escape(out, 0xD800 + (v >> 10));
        u_escape(out, 0xDC00 + (v & 0x3FF));
      }
    }
  }
  out += '"';
}

std::string quoted(std::string_view s, Ascii mode) {
  std::string out;
  out.reserve(s.size() + 2);
  append_quoted(out, s, mode);
  return out;
}

Writer::Writer(Ascii mode, Layout layout) : mode_(mode), layout_(layout) {}

Writer Writer::members(Ascii mode, Layout layout) {
  Writer w(mode, layout);
  w.open_.push_back({layout, true, false, false});
  return w;
}

void Writer::item() {
  if (open_.empty()) {
    if (!out_.empty()) throw std::logic_error("json::Writer: a second document");
    return;
  }
  Level& l = open_.back();
  if (l.want_value) {
    l.want_value = false;
    return;
  }
  if (l.object) throw std::logic_error("json::Writer: a value where a key is due");
  if (l.any) out_ += l.layout.comma;
  out_ += l.layout.lead;
  l.any = true;
}

Writer& Writer::open(char bracket, bool object, Layout layout) {
  item();
  out_ += bracket;
  open_.push_back({layout, object, false, false});
  return *this;
}

Writer& Writer::object() { return open('{', true, layout_); }
Writer& Writer::object(Layout layout) { return open('{', true, layout); }
Writer& Writer::array() { return open('[', false, layout_); }
Writer& Writer::array(Layout layout) { return open('[', false, layout); }

Writer& Writer::end() {
  if (open_.empty() || open_.back().want_value) throw std::logic_error("json::Writer: end() with nothing to close");
  const Level l = open_.back();
  open_.pop_back();
  if (l.any) out_ += l.layout.close;
  out_ += l.object ? '}' : ']';
  return *this;
}

Writer& Writer::key(std::string_view k) {
  if (open_.empty() || !open_.back().object || open_.back().want_value)
    throw std::logic_error("json::Writer: a key outside an object");
  Level& l = open_.back();
  if (l.any) out_ += l.layout.comma;
  out_ += l.layout.lead;
  l.any = true;
  append_quoted(out_, k, mode_);
  out_ += l.layout.colon;
  l.want_value = true;
  return *this;
}

Writer& Writer::string(std::string_view s) {
  item();
  append_quoted(out_, s, mode_);
  return *this;
}

Writer& Writer::string_or_null(std::string_view s) { return s.empty() ? null() : string(s); }

Writer& Writer::boolean(bool v) {
  item();
  out_ += v ? "true" : "false";
  return *this;
}

Writer& Writer::null() {
  item();
  out_ += "null";
  return *this;
}

Writer& Writer::number(std::string_view text) {
  item();
  out_ += text;
  return *this;
}

Writer& Writer::raw(std::string_view json) {
  if (json.empty()) return *this;
  if (!open_.empty() && open_.back().object && !open_.back().want_value) {
    // Members: written as one item of this object.
    Level& l = open_.back();
    if (l.any) out_ += l.layout.comma;
    out_ += l.layout.lead;
    l.any = true;
  } else {
    item();
  }
  out_ += json;
  return *this;
}

}  // namespace ddp::json
