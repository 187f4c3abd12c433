#include "ddp/common/tcpstore_wire.h"

#include <cstring>
#include <optional>

namespace ddp::tcpstore {

namespace {

// Reads fields off the front of a request; any read past the bytes there
// means NeedMore, any length past a limit means Bad.
class Fields {
 public:
  Fields(std::string_view in, const Limits& limits, std::string& why) : in_(in), limits_(limits), why_(why) {}

  template <typename T>
  bool value(T& v) {
    if (in_.size() - at_ < sizeof(T)) return more();
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }

  // A uint64 length and the bytes, at most `cap` of them.
  bool bytes(std::string& s, std::size_t cap, const char* what) {
    std::uint64_t n = 0;
    if (!value(n)) return false;
    if (n > cap) return bad(std::string(what) + " of " + std::to_string(n) + " bytes, over the limit of " +
                            std::to_string(cap));
    if (at_ + n > limits_.max_request)
      return bad("a request over the limit of " + std::to_string(limits_.max_request) + " bytes");
    if (in_.size() - at_ < n) return more();
    s.assign(in_.data() + at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return true;
  }
  bool key(std::string& s) { return bytes(s, limits_.max_key, "a key"); }
  bool data(std::string& s) { return bytes(s, limits_.max_value, "a value"); }

  bool count(std::size_t& n) {
    std::uint64_t v = 0;
    if (!value(v)) return false;
    if (v > limits_.max_keys)
      return bad(std::to_string(v) + " keys in one request, over the limit of " + std::to_string(limits_.max_keys));
    n = static_cast<std::size_t>(v);
    return true;
  }

  std::size_t used() const { return at_; }
  bool needs_more() const { return need_more_; }
  bool is_bad() const { return bad_; }

 private:
  bool more() {
    need_more_ = true;
    return false;
  }
  bool bad(std::string why) {
    bad_ = true;
    why_ = std::move(why);
    return false;
  }

  std::string_view in_;
  const Limits& limits_;
  std::string& why_;
  std::size_t at_ = 0;
  bool need_more_ = false;
  bool bad_ = false;
};

// The op of a byte in a dialect; nullopt for one not served.
std::optional<Op> op_of(std::uint8_t b, Dialect d) {
  // 1.13: SET 0 .. GETNUMKEYS 6, WATCH_KEY 7; 2.x: VALIDATE 0, SET 1 ..
  // GETNUMKEYS 7. Both: DELETE_KEY 8 .. CANCEL_WAIT 12; 2.x: PING 13.
  static constexpr Op kFirst[] = {Op::Set, Op::CompareSet, Op::Get, Op::Add, Op::Check, Op::Wait, Op::GetNumKeys};
  static constexpr Op kShared[] = {Op::DeleteKey, Op::Append, Op::MultiGet, Op::MultiSet, Op::CancelWait};
  if (d == Dialect::Torch1) {
    if (b <= 6) return kFirst[b];
  } else {
    if (b >= 1 && b <= 7) return kFirst[b - 1];
    if (b == 13) return Op::Ping;
  }
  if (b >= 8 && b <= 12) return kShared[b - 8];
  return std::nullopt;  // 1.13's WATCH_KEY (7), 2.x's VALIDATE past the first request, queues, LIST_KEYS
}

}  // namespace

Parsed parse(std::string_view in, Dialect& dialect, const Limits& limits, Request& out, std::size_t& used,
             std::string& why) {
  if (in.empty()) return Parsed::NeedMore;
  if (dialect == Dialect::Unknown) {
    // 2.x opens with VALIDATE and the magic: wait for all five bytes while
    // what is there could still be that.
    std::uint8_t magic[4];
    std::memcpy(magic, &kValidateMagic, 4);
    const std::size_t have = std::min<std::size_t>(in.size(), 5);
    bool could_be_validate = static_cast<std::uint8_t>(in[0]) == 0;
    for (std::size_t i = 1; could_be_validate && i < have; ++i)
      could_be_validate = static_cast<std::uint8_t>(in[i]) == magic[i - 1];
    if (could_be_validate && have < 5) return Parsed::NeedMore;
    dialect = could_be_validate ? Dialect::Torch2 : Dialect::Torch1;
    if (could_be_validate) {
      out = Request{};
      out.op = Op::Validate;
      used = 5;
      return Parsed::Done;
    }
  }
  const auto byte = static_cast<std::uint8_t>(in[0]);
  const auto op = op_of(byte, dialect);
  if (!op) {
    why = "op " + std::to_string(byte) + " (not one a torch " +
          std::string(dialect == Dialect::Torch1 ? "1.x" : "2.x") + " client needs for init_process_group, " +
          "barriers and DDP)";
    return Parsed::Bad;
  }
  Request r;
  r.op = *op;
  Fields f(in.substr(1), limits, why);
  bool ok = true;
  switch (r.op) {
    case Op::Set:
    case Op::Append:
      r.keys.resize(1);
      r.values.resize(1);
      ok = f.key(r.keys[0]) && f.data(r.values[0]);
      break;
    case Op::CompareSet:
      r.keys.resize(1);
      r.values.resize(2);
      ok = f.key(r.keys[0]) && f.data(r.values[0]) && f.data(r.values[1]);
      break;
    case Op::Get:
    case Op::DeleteKey:
      r.keys.resize(1);
      ok = f.key(r.keys[0]);
      break;
    case Op::Add:
      r.keys.resize(1);
      ok = f.key(r.keys[0]) && f.value(r.number);
      break;
    case Op::Check:
    case Op::Wait:
    case Op::MultiGet:
    case Op::MultiSet: {
      std::size_t n = 0;
      ok = f.count(n);
      for (std::size_t i = 0; ok && i < n; ++i) {
        r.keys.emplace_back();
        ok = f.key(r.keys.back());
        if (ok && r.op == Op::MultiSet) {
          r.values.emplace_back();
          ok = f.data(r.values.back());
        }
      }
      break;
    }
    case Op::Ping:
      ok = f.value(r.nonce);
      break;
    case Op::GetNumKeys:
    case Op::CancelWait:
    case Op::Validate:
      break;
  }
  if (!ok) return f.is_bad() ? Parsed::Bad : Parsed::NeedMore;
  out = std::move(r);
  used = 1 + f.used();
  return Parsed::Done;
}

std::string reply_bytes(std::string_view v) {
  std::string s = reply_i64(static_cast<std::int64_t>(v.size()));
  s.append(v);
  return s;
}

std::string reply_i64(std::int64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }
std::string reply_u8(std::uint8_t v) { return std::string(1, static_cast<char>(v)); }
std::string reply_u32(std::uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }

Dialect client_of(std::string_view first, bool& need_more) {
  Dialect d = Dialect::Unknown;
  Request r;
  std::size_t used = 0;
  std::string why;
  const Parsed p = parse(first, d, Limits{}, r, used, why);
  need_more = p == Parsed::NeedMore;
  return p == Parsed::Done ? d : Dialect::Unknown;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Validate: return "VALIDATE";
    case Op::Set: return "SET";
    case Op::CompareSet: return "COMPARE_SET";
    case Op::Get: return "GET";
    case Op::Add: return "ADD";
    case Op::Check: return "CHECK";
    case Op::Wait: return "WAIT";
    case Op::GetNumKeys: return "GETNUMKEYS";
    case Op::DeleteKey: return "DELETE_KEY";
    case Op::Append: return "APPEND";
    case Op::MultiGet: return "MULTI_GET";
    case Op::MultiSet: return "MULTI_SET";
    case Op::CancelWait: return "CANCEL_WAIT";
    case Op::Ping: return "PING";
  }
  return "?";
}

}  // namespace ddp::tcpstore
