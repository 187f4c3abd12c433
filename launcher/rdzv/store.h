#pragma once
// What the rendezvous (rendezvous.h) asks of its store: the key-value
// requests of store_protocol.h. Two implementations: StoreClient, a
// connection to the store one node hosts (the real one), and MemoryStore,
// one process's map (for tests, as gloo's HashStore). Every request that
// waits has a bound; a store that misses it throws StoreError.
//
// multi_get and multi_set let one node read or write the round's O(n) keys
// in one request (the node that closes a round: Rendezvous::join). Their
// defaults ask key by key, so a store need not implement them; etcd v3 can
// do each in one Txn of Range or Put operations (at most --max-txn-ops a Txn).
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ddp::rdzv {

// The store could not be reached, or stopped answering in time.
struct StoreError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The store answered, and refused the request (an add to a value that is
// not a number, a value over its caps): the store is up; what it holds or
// was asked is wrong. what(): the store's reason (callers name the store).
struct StoreRefused : StoreError {
  using StoreError::StoreError;
};

// A stored value in a message: its first 64 bytes (a value may be megabytes).
inline std::string shown_value(const std::string& value) {
  return value.size() > 64 ? value.substr(0, 64) + "..." : value;
}

// Why an add was refused, in the same words from every store.
inline std::string not_a_number(const std::string& key, const std::string& value) {
  return "add to key '" + key + "', whose value is not a number: '" + shown_value(value) + "'";
}

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits for the key up to the store's own timeout (StoreError past it).
  virtual std::string get(const std::string& key) = 0;
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // The value after adding delta; a missing key counts 0.
  virtual long long add(const std::string& key, long long delta) = 0;
  virtual bool check(const std::string& key) = 0;
  // Sets desired when the key is absent and expected is "", or holds
  // expected; returns the value after the request ("" if still absent).
  virtual std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) = 0;
  // False when the key was not set within timeout.
  virtual bool wait(const std::string& key, std::chrono::milliseconds timeout) = 0;

  // The values of keys, in order (nullopt: absent). Not waiting.
  virtual std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) {
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(try_get(k));
    return out;
  }
  // Sets every key to its value (in order; a waiter on any is answered).
  virtual void multi_set(const std::vector<std::pair<std::string, std::string>>& entries) {
    for (const auto& [k, v] : entries) set(k, v);
  }
};

}  // namespace ddp::rdzv
