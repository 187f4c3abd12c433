#pragma once
// One node's HTTP/JSON connection to an etcd v3 cluster: etcd's own JSON
// gateway (/v3/kv/range, /v3/kv/txn, /v3/watch, ...; etcd 3.4 and later),
// over Boost.Beast. EtcdStore (etcd_store.h) is its only caller; it knows
// the paths and JSON bodies, this file knows members, deadlines and
// failover. Never a wait without end: every request has a deadline, each
// try at one member a shorter one (a member that accepts and does not
// answer costs one try, not the deadline). A member that is down, slow, or
// answers "no leader" during an election is left for the next one; past the
// deadline the error names every member and why it failed, in one line.
#include "store.h"

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/property_tree/ptree_fwd.hpp>

namespace ddp::rdzv {

// Something answers at an endpoint, but not as etcd's v3 JSON gateway.
struct NotEtcd : StoreError {
  using StoreError::StoreError;
};

class EtcdGateway {
 public:
  using Clock = std::chrono::steady_clock;
  struct Member {
    std::string host;
    int port = 2379;
    std::string name() const;  // host:port, [v6]:port
  };
  // Parses "host[:port],host[:port],..." (port default 2379). Throws
  // std::invalid_argument naming the bad item.
  static std::vector<Member> parse_members(const std::string& text);

  // try_timeout: the most one try at one member may take.
  EtcdGateway(std::vector<Member> members, std::chrono::milliseconds try_timeout);

  // POSTs body to path; returns the answer's JSON. Tries the members in
  // turn until one answers or the deadline passes (StoreError naming each
  // member's last failure). An answer that is an etcd error other than an
  // election's throws StoreError at once; one that is not etcd's, NotEtcd.
  boost::property_tree::ptree post(const std::string& path, const std::string& body, Clock::time_point deadline);

  // A streaming POST (/v3/watch): calls until_seen with the body read so
  // far after each piece; returns true as soon as it says so, false at the
  // deadline. A member that fails mid-stream throws StoreError (the caller
  // reads the key again, then watches again).
  bool stream(const std::string& path, const std::string& body, Clock::time_point deadline,
              const std::function<bool(const std::string&)>& until_seen);

  // The member the last request went to, for messages.
  std::string current() const { return members_.at(current_).name(); }
  std::string all() const;  // every member, comma-separated

 private:
  boost::property_tree::ptree try_post(const std::string& path, const std::string& body, Clock::time_point until);
  void connect(boost::asio::ip::tcp::socket& s, const Member& m, Clock::time_point until);
  void run_until(Clock::time_point until, const std::string& what, boost::asio::ip::tcp::socket& s);
  void next_member();

  std::vector<Member> members_;
  std::chrono::milliseconds try_timeout_;
  std::size_t current_ = 0;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_{io_};  // kept open between requests
  boost::beast::flat_buffer buffer_;
};

}  // namespace ddp::rdzv
