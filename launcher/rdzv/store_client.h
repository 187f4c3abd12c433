#pragma once
// A ddp-launch node's connection to the rendezvous store (store_server.h),
// in the protocol of store_protocol.h. One request at a time; each one has a
// deadline (io_timeout, plus its own wait for get and wait), and a store
// that misses it is an error, never a wait without end. After an error the
// connection is closed and every later request fails.
#include "store.h"

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace ddp::rdzv {

// Something answers at the endpoint, but not as a ddp-launch rendezvous
// store of this protocol version: what it is, as far as the hello tells.
struct ForeignStore : StoreError {
  using StoreError::StoreError;
};

// The store is ddp-launch's, of a protocol version this node does not speak.
struct OtherVersionStore : ForeignStore {
  using ForeignStore::ForeignStore;
};

// A request that got no answer: the connection broke or the store was
// silent past the request's deadline. what() names the endpoint; detail
// is the rest, for messages that name the endpoint themselves.
struct StoreLost : StoreError {
  StoreLost(const std::string& endpoint, const std::string& d)
      : StoreError("the rendezvous store at " + endpoint + ": " + d), detail(d) {}
  std::string detail;
};

class StoreClient final : public Store {
 public:
  // Connects to host:port and says hello, both within connect_timeout.
  // Throws StoreError (nothing accepts the connection in time) or
  // ForeignStore (the hello is refused, unanswered or garbled) or
  // OtherVersionStore.
  StoreClient(const std::string& host, int port, std::chrono::milliseconds connect_timeout,
              std::chrono::milliseconds io_timeout, const std::string& launcher_version);

  void set(const std::string& key, const std::string& value) override;
  // Waits for the key up to io_timeout.
  std::string get(const std::string& key) override;
  std::optional<std::string> try_get(const std::string& key) override;
  long long add(const std::string& key, long long delta) override;
  bool check(const std::string& key) override;
  // See store_protocol.h: the value after the request ("" if still absent).
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool wait(const std::string& key, std::chrono::milliseconds timeout) override;
  // One request each (store_protocol.h, version 2).
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::pair<std::string, std::string>>& entries) override;

  // The ddp-launch version of the node that hosts the store.
  const std::string& store_launcher_version() const { return store_version_; }

 private:
  // Sends a request, reads its answer; returns it with the status read.
  std::string transact(const std::string& frame, std::chrono::milliseconds wait, const std::string& what);
  void run_until(std::chrono::steady_clock::time_point deadline, const std::string& what);
  std::string read_frame(std::chrono::steady_clock::time_point deadline, const std::string& what);
  [[noreturn]] void fail(const std::string& why);
  // StoreRefused with the store's message unless the answer is ok.
  void refused_unless_ok(const std::string& body);

  std::string endpoint_;
  std::chrono::milliseconds io_timeout_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_{io_};
  std::string store_version_;
};

}  // namespace ddp::rdzv
