#pragma once
// The workers' store, hosted by the launcher (TORCHELASTIC_USE_AGENT_STORE=
// True, as torchrun 2.x's use_agent_store): a key-value table served in the
// c10d TCPStore wire format (tcpstore_wire.h) to the TCPStore clients of
// torch 1.13 and 2.x, Python or C++, on one thread of Boost.Asio of its
// own. Made once per run by the Supervisor (RunServices::workers_store), so
// it outlives every worker: rank 0 may die, the store stays, and its port is
// bound once and kept (no race for MASTER_PORT between attempts).
//  - One table per attempt: new_attempt() empties it and closes every
//    connection left, before the attempt's workers start. torch 2.x's
//    clients use no per-attempt prefix ("a new TCPStore for every retry"),
//    so a dead attempt's keys (gloo's addresses) would mislead the next.
//  - Bad clients: every length is capped (Limits) before its bytes are
//    read; a request begun must be finished within request_timeout; at most
//    max_connections at once, max_buffered_bytes of unfinished requests and
//    max_table_bytes in the table; a client
//    that does not read its replies stops being read. What breaks a rule
//    closes that connection with a log line (at most kMaxLogLines a run),
//    never the store; other clients are not affected.
// It never links LibTorch, never knows a worker, never blocks its caller.
#include "ddp/common/tcpstore_wire.h"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace ddp::launcher {

// The wire format lives in ddp/common: ddp-rdzv reads it too.
namespace tcpstore = ddp::tcpstore;

struct WorkersStoreOptions {
  int port = 0;  // 0: a free one the kernel picks
  tcpstore::Limits limits;
  std::chrono::milliseconds request_timeout{std::chrono::seconds(60)};
  std::size_t max_connections = 65536;
  std::size_t max_table_bytes = std::size_t{4} << 30;
  std::size_t max_buffered_bytes = std::size_t{1} << 30;  // unfinished requests, all connections
  std::size_t max_pending_reply_bytes = std::size_t{256} << 20;
  // A line for the launcher's log (called on the store's thread).
  std::function<void(const std::string&)> log;
};

class WorkersStore {
 public:
  static constexpr int kMaxLogLines = 20;

  // Listens on every address of this machine (IPv6 and IPv4 where there is
  // IPv6). Throws std::runtime_error naming the port when it cannot be bound.
  explicit WorkersStore(WorkersStoreOptions opts);
  ~WorkersStore();
  WorkersStore(const WorkersStore&) = delete;
  WorkersStore& operator=(const WorkersStore&) = delete;

  int port() const;
  // Empties the table and closes every connection; returns once done.
  void new_attempt();
  // Tests: keys in the table and connections open, read on its thread.
  std::size_t keys_for_tests() const;
  std::size_t connections_for_tests() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::launcher
