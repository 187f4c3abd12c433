#pragma once
// The c10d TCPStore wire format, as its clients in LibTorch/torch 1.13 and
// 2.x speak it, for the workers' store the launcher hosts
// (launcher/process/workers_store.h), and for the rendezvous store of
// ddp-rdzv, which recognises a torchrun node's TCPStore client by its first
// bytes (client_of). Pure: bytes in, requests out; replies as bytes. The
// launcher never links LibTorch, so the format is written down here, from
// torch/csrc/distributed/c10d/TCPStore.cpp (v1.13) and TCPStoreBackend.hpp,
// TCPStoreLibUvBackend.cpp (2.x):
//  - No framing: a request is an op byte and its fields back to back.
//    Strings and byte vectors are a uint64 length and the bytes, counts a
//    uint64, numbers int64, PING's nonce a uint32; all in the host's byte
//    order (little-endian on every machine torch runs on).
//  - Two numberings of the ops. torch 2.x opens every connection with
//    VALIDATE (op 0) and the uint32 magic 0x3C85F7CE, and numbers SET 1 ..
//    GETNUMKEYS 7; torch 1.13 sends no VALIDATE and numbers SET 0 ..
//    GETNUMKEYS 6, WATCH_KEY 7. From DELETE_KEY (8) to CANCEL_WAIT (12) both
//    agree; 2.x adds PING (13) and queue ops (14..). A connection whose first
//    five bytes are 0 and the magic is a 2.x one, any other a 1.13 one: a
//    1.13 SET's key length can never be the magic under kMaxKey.
//  - Replies: GET, COMPARE_SET and each key of MULTI_GET a byte vector; ADD,
//    GETNUMKEYS and DELETE_KEY an int64; CHECK one byte (0 ready, 1 not);
//    WAIT one byte STOP_WAITING (0) when every key is there; CANCEL_WAIT one
//    byte WAIT_CANCELED (1); PING the nonce; SET, APPEND, MULTI_SET and
//    VALIDATE none.
// Every length is checked against Limits before its bytes are awaited, so
// a client can never make the reader hold more than Limits::max_request.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::tcpstore {

inline constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;

enum class Dialect { Unknown, Torch1, Torch2 };

enum class Op { Validate, Set, CompareSet, Get, Add, Check, Wait, GetNumKeys, DeleteKey, Append, MultiGet, MultiSet,
                CancelWait, Ping };

inline constexpr std::uint8_t kReady = 0, kNotReady = 1;
inline constexpr std::uint8_t kStopWaiting = 0, kWaitCanceled = 1;

struct Limits {
  std::size_t max_key = 64u << 10;       // bytes of one key
  std::size_t max_value = 64u << 20;     // bytes of one value
  std::size_t max_keys = 128u << 10;     // keys of one CHECK / WAIT / MULTI_* (libuv's MAX_KEY_COUNT)
  std::size_t max_request = 128u << 20;  // bytes of one whole request
};

struct Request {
  Op op = Op::Set;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // SET/APPEND: 1; COMPARE_SET: expected, desired; MULTI_SET: one per key
  std::int64_t number = 0;          // ADD's delta
  std::uint32_t nonce = 0;          // PING's
};

enum class Parsed { Done, NeedMore, Bad };

// Parses the request at the front of `in` for a connection that speaks
// `dialect` (Unknown before its first request: set here). Done: `out` is
// the request and `used` its bytes. NeedMore: `in` holds only its start.
// Bad: `why` says what (an unknown op, a length over a limit); the
// connection is then closed.
Parsed parse(std::string_view in, Dialect& dialect, const Limits& limits, Request& out, std::size_t& used,
             std::string& why);

// Reply encoders.
std::string reply_bytes(std::string_view v);
std::string reply_i64(std::int64_t v);
std::string reply_u8(std::uint8_t v);
std::string reply_u32(std::uint32_t v);

// A request's op as torch names it, for messages.
const char* op_name(Op op);

// What the first bytes of a connection say of its client: Torch2 (VALIDATE
// and the magic), Torch1 (a whole first request of torch 1.13, e.g. its
// ADD of "init/"), Unknown (neither: another program), with need_more set
// while the bytes so far could still be either.
Dialect client_of(std::string_view first, bool& need_more);

}  // namespace ddp::tcpstore
