#include "etcd_store.h"

#include "ddp/common/ptree_json.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include <boost/beast/core/detail/base64.hpp>

namespace ddp::rdzv {

using boost::property_tree::ptree;
using Clock = EtcdGateway::Clock;
namespace b64 = boost::beast::detail::base64;

namespace {

// Keys and values are bytes, base64 in etcd's JSON; base64 needs no JSON
// escaping, so the request bodies are written as text.
std::string enc(const std::string& s) {
  std::string out(b64::encoded_size(s.size()), '\0');
  out.resize(b64::encode(out.data(), s.data(), s.size()));
  return out;
}

std::string dec(const std::string& s) {
  std::string out(b64::decoded_size(s.size()), '\0');
  out.resize(b64::decode(out.data(), s.data(), s.size()).first);
  return out;
}

std::string q(const std::string& s) { return "\"" + s + "\""; }

std::string put_op(const std::string& key, const std::string& value) {
  return "{\"request_put\":{\"key\":" + q(enc(key)) + ",\"value\":" + q(enc(value)) + "}}";
}
std::string range_op(const std::string& key) { return "{\"request_range\":{\"key\":" + q(enc(key)) + "}}"; }

// The key is absent (its create_revision is 0), or holds value.
std::string absent(const std::string& key) {
  return "{\"key\":" + q(enc(key)) + ",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}";
}
std::string holds(const std::string& key, const std::string& value) {
  return "{\"key\":" + q(enc(key)) + ",\"target\":\"VALUE\",\"result\":\"EQUAL\",\"value\":" + q(enc(value)) + "}";
}
std::string unchanged_since(const std::string& key, long long mod_revision) {
  return "{\"key\":" + q(enc(key)) + ",\"target\":\"MOD\",\"result\":\"EQUAL\",\"mod_revision\":\"" +
         std::to_string(mod_revision) + "\"}";
}

std::string txn(const std::string& compare, const std::string& success, const std::string& failure) {
  return "{\"compare\":[" + compare + "],\"success\":[" + success + "],\"failure\":[" + failure + "]}";
}

// A range answer's first key: its value and mod_revision (none: absent).
std::optional<std::pair<std::string, long long>> first_kv(const ptree& range) {
  const auto kvs = range.get_child_optional("kvs");
  if (!kvs || kvs->empty()) return std::nullopt;
  const ptree& kv = kvs->begin()->second;
  return std::pair(dec(kv.get<std::string>("value", "")), kv.get<long long>("mod_revision", 0));
}

// The range answer inside a txn's failure branch.
const ptree& txn_range(const ptree& answer) {
  const auto rs = answer.get_child_optional("responses");
  if (!rs || rs->empty()) throw StoreError("etcd answered a transaction without its read");
  return rs->begin()->second.get_child("response_range");
}

long long number(const std::string& key, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw StoreRefused("etcd: " + not_a_number(key, v));
  return n;
}

}  // namespace

EtcdStore::EtcdStore(const std::string& endpoints, std::chrono::milliseconds first_contact,
                     std::chrono::milliseconds io_timeout)
    : io_timeout_(io_timeout),
      gw_(EtcdGateway::parse_members(endpoints), std::min<std::chrono::milliseconds>(io_timeout, std::chrono::seconds(3))) {
  // One read proves a member answers as etcd, with a leader.
  read("/ddp-rdzv", Clock::now() + first_contact);
}

Clock::time_point EtcdStore::deadline() const { return Clock::now() + io_timeout_; }

EtcdStore::Read EtcdStore::read(const std::string& key, Clock::time_point until) {
  const ptree a = gw_.post("/v3/kv/range", "{\"key\":" + q(enc(key)) + "}", until);
  Read r;
  r.revision = a.get<long long>("header.revision", 0);
  if (auto kv = first_kv(a)) {
    r.value = kv->first;
    r.mod_revision = kv->second;
  }
  return r;
}

void EtcdStore::set(const std::string& key, const std::string& value) {
  gw_.post("/v3/kv/put", "{\"key\":" + q(enc(key)) + ",\"value\":" + q(enc(value)) + "}", deadline());
}

std::optional<std::string> EtcdStore::try_get(const std::string& key) { return read(key, deadline()).value; }

bool EtcdStore::check(const std::string& key) { return try_get(key).has_value(); }

long long EtcdStore::add(const std::string& key, long long delta) {
  const auto until = deadline();
  Read r = read(key, until);
  while (true) {
    const long long now = r.value ? number(key, *r.value) : 0;
    if (delta == 0 && r.value) return now;
    const std::string cmp = r.value ? unchanged_since(key, r.mod_revision) : absent(key);
    const ptree a = gw_.post("/v3/kv/txn", txn(cmp, put_op(key, std::to_string(now + delta)), range_op(key)), until);
    if (a.get<bool>("succeeded", false)) return now + delta;
    // Another node's add came first: its result is in the failure branch.
    r = Read{};
    if (auto kv = first_kv(txn_range(a))) {
      r.value = kv->first;
      r.mod_revision = kv->second;
    }
  }
}

std::string EtcdStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  // An absent key matches "" (store.h); a present key holding "" does too.
  std::string cmp = holds(key, expected);
  if (expected.empty()) {
    // Two compares cannot be or-ed in one txn: try absent first, then "".
    const ptree a = gw_.post("/v3/kv/txn", txn(absent(key), put_op(key, desired), range_op(key)), deadline());
    if (a.get<bool>("succeeded", false)) return desired;
    const auto kv = first_kv(txn_range(a));
    if (!kv) return "";
    if (!kv->first.empty()) return kv->first;
  }
  const ptree a = gw_.post("/v3/kv/txn", txn(cmp, put_op(key, desired), range_op(key)), deadline());
  if (a.get<bool>("succeeded", false)) return desired;
  const auto kv = first_kv(txn_range(a));
  return kv ? kv->first : "";
}

namespace {
constexpr std::size_t kMaxTxnOps = 128;  // etcd's default --max-txn-ops
}  // namespace

std::vector<std::optional<std::string>> EtcdStore::multi_get(const std::vector<std::string>& keys) {
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  const auto until = deadline();
  for (std::size_t at = 0; at < keys.size(); at += kMaxTxnOps) {
    std::string ops;
    const std::size_t end = std::min(keys.size(), at + kMaxTxnOps);
    for (std::size_t i = at; i < end; ++i) ops += (i > at ? "," : "") + range_op(keys[i]);
    const ptree a = gw_.post("/v3/kv/txn", txn("", ops, ""), until);
    const auto rs = a.get_child_optional("responses");
    if (!rs || rs->size() != end - at) throw StoreError("etcd answered a read of " + std::to_string(end - at) +
                                                        " keys with another number of answers");
    for (const auto& r : *rs) {
      const auto kv = first_kv(r.second.get_child("response_range"));
      out.push_back(kv ? std::optional<std::string>(kv->first) : std::nullopt);
    }
  }
  return out;
}

void EtcdStore::multi_set(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::vector<std::pair<std::string, std::string>> once;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (std::none_of(once.begin(), once.end(), [&](const auto& e) { return e.first == it->first; })) once.push_back(*it);
  std::reverse(once.begin(), once.end());
  const auto until = deadline();
  for (std::size_t at = 0; at < once.size(); at += kMaxTxnOps) {
    std::string ops;
    const std::size_t end = std::min(once.size(), at + kMaxTxnOps);
    for (std::size_t i = at; i < end; ++i) ops += (i > at ? "," : "") + put_op(once[i].first, once[i].second);
    gw_.post("/v3/kv/txn", txn("", ops, ""), until);
  }
}

bool EtcdStore::wait(const std::string& key, std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (true) {
    const Read r = read(key, std::max(until, Clock::now() + std::min(io_timeout_, std::chrono::milliseconds(3000))));
    if (r.value) return true;
    if (Clock::now() >= until) return false;
    // Watch from the revision after the read: a write in between is seen.
    // Each watch lasts at most 3 s, then the key is read again: a member
    // that hangs without closing the stream costs one slice.
    const auto slice = std::min(until, Clock::now() + std::chrono::seconds(3));
    const std::string body = "{\"create_request\":{\"key\":" + q(enc(key)) + ",\"start_revision\":\"" +
                             std::to_string(r.revision + 1) + "\"}}";
    try {
      if (gw_.stream("/v3/watch", body, slice, [](const std::string& seen) {
            return seen.find("\"events\"") != std::string::npos;
          }))
        return true;
    } catch (const NotEtcd&) {
      throw;
    } catch (const StoreError&) {
      // The member went away mid-watch; the next read goes to another one.
    }
  }
}

std::string EtcdStore::get(const std::string& key) {
  if (!wait(key, io_timeout_))
    throw StoreError("etcd: key '" + key + "' was not set within " + std::to_string(io_timeout_.count() / 1000) +
                     " s (read_timeout)");
  if (auto v = try_get(key)) return *v;
  throw StoreError("etcd: key '" + key + "' was deleted while this node read it");
}

}  // namespace ddp::rdzv
