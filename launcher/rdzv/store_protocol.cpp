#include "store_protocol.h"

namespace ddp::rdzv::wire {

namespace {

void put_be(std::string& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_be(std::string_view in) {
  std::uint64_t v = 0;
  for (unsigned char c : in) v = (v << 8) | c;
  return v;
}

}  // namespace

Writer& Writer::u8(std::uint8_t v) {
  body_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::u32(std::uint32_t v) {
  put_be(body_, v, 4);
  return *this;
}

Writer& Writer::i64(std::int64_t v) {
  put_be(body_, static_cast<std::uint64_t>(v), 8);
  return *this;
}

Writer& Writer::str(std::string_view s) {
  u32(static_cast<std::uint32_t>(s.size()));
  body_.append(s);
  return *this;
}

std::string Writer::frame() const {
  std::string out;
  out.reserve(4 + body_.size());
  put_be(out, body_.size(), 4);
  return out + body_;
}

std::string_view Reader::take(std::size_t n) {
  if (n > body_.size() - at_)
    throw ProtocolError("a frame ended " + std::to_string(n - (body_.size() - at_)) + " bytes early");
  const std::string_view s = body_.substr(at_, n);
  at_ += n;
  return s;
}

std::uint8_t Reader::u8() { return static_cast<std::uint8_t>(take(1)[0]); }
std::uint32_t Reader::u32() { return static_cast<std::uint32_t>(get_be(take(4))); }
std::int64_t Reader::i64() { return static_cast<std::int64_t>(get_be(take(8))); }
std::string Reader::str() { return std::string(take(u32())); }

void Reader::end() const {
  if (at_ != body_.size())
    throw ProtocolError("a frame has " + std::to_string(body_.size() - at_) + " bytes after its last field");
}

std::uint32_t frame_length(const unsigned char header[4]) {
  const auto n = static_cast<std::uint32_t>(get_be(std::string_view(reinterpret_cast<const char*>(header), 4)));
  if (n > kMaxFrame)
    throw ProtocolError("a frame of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxFrame) + ")");
  return n;
}

}  // namespace ddp::rdzv::wire
