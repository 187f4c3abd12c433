#pragma once
// What the rendezvous (rendezvous.h) asks of its store: the key-value
// requests of store_protocol.h. Two implementations: StoreClient, a
// connection to the store one node hosts (the real one), and MemoryStore,
// one process's map (for tests, as gloo's HashStore). Every request that
// waits has a bound; a store that misses it throws StoreError.
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

namespace ddp::rdzv {

// The store could not be reached, or stopped answering in time.
struct StoreError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
};

}  // namespace ddp::rdzv
