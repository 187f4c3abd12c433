#pragma once
// The rendezvous store's wire protocol: what ddp-launch nodes (their
// ddp-rdzv helpers) say to the store that one of them hosts at
// --rdzv_endpoint. Only ddp-launch nodes speak it (the workers get their
// own store: TORCHELASTIC_USE_AGENT_STORE=False), so it is ours, not
// LibTorch's TCPStore protocol, and the helper needs no LibTorch.
//
// A frame is a 4-byte big-endian length and that many bytes (at most
// kMaxFrame). A request is an op byte and its fields; a reply a status byte
// and its fields. Strings are a 4-byte big-endian length and the bytes,
// integers 8 bytes big-endian (two's complement), flags one byte.
//
//   hello   magic version launcher_version -> ok magic version launcher_version
//                                         | version magic version launcher_version
//   set     key value                      -> ok
//   get     key timeout_ms                 -> ok value | timeout   (waits for the key)
//   try_get key                            -> ok value | absent
//   add     key delta                      -> ok sum               (a missing key counts 0)
//   check   key                            -> ok flag
//   compare_set key expected desired       -> ok value_now
//            (absent and expected "": set; present and equal to expected:
//             set; otherwise unchanged; value_now is what the key holds
//             after, "" for a key still absent)
//   wait    key timeout_ms                 -> ok | timeout
//   multi_get count key...                 -> ok count (flag value)...
//            (version 2; flag 1 and the value for a present key, 0 alone
//             for an absent one)
//   multi_set count (key value)...         -> ok   (version 2)
// and `error message` for a request the store refuses (add to a value that
// is not a number; a write beyond the store's caps, store_server.h: it
// changes nothing). Version 2 clients before the caps read `error` for
// set, add and multi_set, but take a refused compare_set's message for the
// value: only a compare_set that ddp-launch never sends (a value over the
// cap) is refused, so the caps stay within version 2.
//
// The first frame of a connection must be hello with kMagic; the store
// closes a connection that starts otherwise (a TCPStore client, which it
// names first, or a port scanner). Versions: a store answers `ok` when it speaks the client's
// version, else `version` with the newest it speaks, and the client says
// which ddp-launch each side is. Version 1 is the first. Version 2 adds
// multi_get and multi_set, and its rendezvous keys (rendezvous.h) are not
// version 1's: a node of one cannot take part in a rendezvous of the other,
// so a version 2 store refuses version 1 nodes at the hello (they say
// "start every node with the same ddp-launch version") instead of letting
// them wait for keys that nobody writes.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddp::rdzv::wire {

inline constexpr std::string_view kMagic = "ddp-launch rendezvous store";
inline constexpr std::uint32_t kVersion = 2;
inline constexpr std::uint32_t kMaxFrame = 16u << 20;

enum class Op : std::uint8_t { Hello = 1, Set, Get, TryGet, Add, Check, CompareSet, Wait, MultiGet, MultiSet };
enum class Status : std::uint8_t { Ok = 0, Absent, Timeout, Error, Version };

// A frame that does not parse: the peer is not speaking this protocol.
struct ProtocolError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Builds one frame's body.
class Writer {
 public:
  Writer& u8(std::uint8_t v);
  Writer& u32(std::uint32_t v);
  Writer& i64(std::int64_t v);
  Writer& str(std::string_view s);
  // The body with its 4-byte length in front.
  std::string frame() const;
  const std::string& body() const { return body_; }

 private:
  std::string body_;
};

// Reads one frame's body; every read is bounds-checked (ProtocolError).
class Reader {
 public:
  // Reads `body` in place: it must outlive the Reader (a temporary string
  // would not, hence the deleted overload).
  explicit Reader(std::string_view body) : body_(body) {}
  explicit Reader(std::string&&) = delete;
  std::uint8_t u8();
  std::uint32_t u32();
  std::int64_t i64();
  std::string str();
  // ProtocolError unless the whole body was read.
  void end() const;

 private:
  std::string_view take(std::size_t n);
  std::string_view body_;
  std::size_t at_ = 0;
};

// The body length in a frame's 4-byte header; ProtocolError past kMaxFrame.
std::uint32_t frame_length(const unsigned char header[4]);

}  // namespace ddp::rdzv::wire
