#pragma once
// The rendezvous store that one ddp-launch node hosts at --rdzv_endpoint:
// a key-value table in memory, served over TCP in the protocol of
// store_protocol.h by one thread of Boost.Asio. Requests that wait for a key
// (get, wait) are answered when the key is set or their timeout passes;
// every other request at once. A connection that does not start with the
// protocol's hello is closed.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ddp::rdzv {

class StoreServer {
 public:
  // Listens on every address of this machine at `port` (0: a free one the
  // kernel picks), IPv6 and IPv4 where the machine has IPv6, else IPv4.
  // Throws std::system_error when the port cannot be bound (another store
  // listens there). launcher_version goes into every hello answer.
  StoreServer(int port, std::string launcher_version);
  // Stops serving: every connection is closed.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const;

  // Tests: the protocol version this store answers hello with (a store of
  // a later ddp-launch), set before the first connection.
  void speak_version_for_tests(std::uint32_t version);
  // Tests: how many waits the table lists (asked of the server's thread).
  std::size_t waits_listed_for_tests();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::rdzv
