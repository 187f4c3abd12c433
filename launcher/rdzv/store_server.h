#pragma once
// The rendezvous store that one ddp-launch node hosts at --rdzv_endpoint:
// a key-value table in memory, served over TCP in the protocol of
// store_protocol.h by one thread of Boost.Asio. Requests that wait for a key
// (get, wait) are answered when the key is set or their timeout passes;
// every other request at once. A connection that does not start with the
// protocol's hello is closed; if its first bytes are a TCPStore client's
// (a torchrun node at this endpoint), it is named first. Writes beyond Caps
// are refused.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ddp::rdzv {

// What the store holds at most. A rendezvous needs kilobytes a node (about
// 2.6 MB a round at 4000 nodes): the caps leave room for a hundred such
// rounds and refuse a client that sends more (`error`, naming the cap),
// so no client can make the host's memory grow without bound.
struct Caps {
  std::size_t max_key = 4u << 10;        // bytes of one key
  std::size_t max_value = 64u << 10;     // bytes of one value
  std::size_t max_total = 256u << 20;    // bytes of every key and value together
};

class StoreServer {
 public:
  // Listens on every address of this machine at `port` (0: a free one the
  // kernel picks), IPv6 and IPv4 where the machine has IPv6, else IPv4.
  // Throws std::system_error when the port cannot be bound (another store
  // listens there). launcher_version goes into every hello answer.
  // A torchrun node's TCPStore client came (recognised by its first bytes,
  // ddp/common/tcpstore_wire.h): its address and its torch ("2.x", "1.x").
  // Called on the server's thread, once a connection (torchrun retries:
  // several); the connection is then closed.
  using TcpStoreClient = std::function<void(const std::string& address, const char* torch)>;

  StoreServer(int port, std::string launcher_version, Caps caps = {}, TcpStoreClient on_tcpstore_client = {});
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
