#include "store_server.h"

#include "store.h"
#include "store_protocol.h"

#include "ddp/common/listen_any.h"
#include "ddp/common/tcpstore_wire.h"

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <future>
#include <thread>
#include <utility>
#include <vector>

namespace ddp::rdzv {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace wire;

namespace {

class Connection;

// The table and who waits for which key. Touched only by the server's thread.
struct Table {
  using Waiters = std::multimap<std::string, std::weak_ptr<Connection>>;
  std::map<std::string, std::string> values;
  // One entry per wait in progress: a wait that ends by its timeout or its
  // connection's close takes its entry out, so that waits cut into slices
  // (a node's 1 s waits for a round that is slow to close) leave nothing.
  Waiters waiters;
  std::atomic<std::uint32_t> version{kVersion};
  std::string launcher_version;
  Caps caps;
  std::size_t bytes = 0;  // of every key and value held
  StoreServer::TcpStoreClient on_tcpstore_client;

  void changed(const std::string& key);

  // Why these writes would break a cap ("" when they fit): the table's
  // memory stays bounded whatever a client sends (issue 51 item 11).
  std::string refusal(const std::vector<std::pair<std::string, std::string>>& writes) const {
    std::size_t after = bytes;
    for (const auto& [key, value] : writes) {
      if (key.size() > caps.max_key)
        return "a key of " + std::to_string(key.size()) + " bytes, over the store's cap of " +
               std::to_string(caps.max_key) + " bytes a key";
      if (value.size() > caps.max_value)
        return "a value of " + std::to_string(value.size()) + " bytes for key '" + key.substr(0, 64) +
               "', over the store's cap of " + std::to_string(caps.max_value) + " bytes a value";
      const auto it = values.find(key);
      after += value.size() + (it == values.end() ? key.size() : 0) - (it == values.end() ? 0 : it->second.size());
    }
    if (after > caps.max_total)
      return "setting key '" + writes.front().first.substr(0, 64) + "' would make the store hold " +
             std::to_string(after) + " bytes, over its cap of " + std::to_string(caps.max_total) + " bytes";
    return "";
  }
  // Sets a key (its size already checked by refusal()), answering its waiters.
  void put(const std::string& key, std::string value) {
    auto [it, added] = values.try_emplace(key);
    bytes += value.size() + (added ? key.size() : 0) - it->second.size();
    it->second = std::move(value);
    changed(key);
  }
};

std::optional<long long> integer(const std::string& s) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// One client: reads a request, answers it (now, or when the key it waits
// for is set, or at its timeout), reads the next.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, Table& table)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), table_(table) {}

  void start() { read_header(); }

  // The key this connection waits for was set: answer if it is there.
  // The table took the wait's entry out before calling.
  void key_changed() {
    if (!waiting_) return;
    waiting_->entry.reset();
    auto it = table_.values.find(waiting_->key);
    if (it == table_.values.end()) return;
    const Op op = waiting_->op;
    waiting_.reset();
    timer_.cancel();
    send(op == Op::Get ? Writer().u8(static_cast<std::uint8_t>(Status::Ok)).str(it->second)
                       : Writer().u8(static_cast<std::uint8_t>(Status::Ok)));
  }

 private:
  struct Waiting {
    Op op;
    std::string key;
    std::uint64_t id;
    std::optional<Table::Waiters::iterator> entry;  // while the table lists it
  };

  // Ends the wait in progress, if any, and takes it off the table's list.
  void stop_waiting() {
    if (waiting_ && waiting_->entry) table_.waiters.erase(*waiting_->entry);
    waiting_.reset();
  }

  void read_header() {
    asio::async_read(socket_, asio::buffer(header_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->close();
      // Before hello, nothing longer than a hello: a stranger's bytes, maybe
      // a torchrun node's TCPStore client (its first request).
      if (!self->greeted_ && (self->header_[0] || self->header_[1] || self->header_[2]))
        return self->read_stranger(std::string(reinterpret_cast<const char*>(self->header_), 4));
      std::uint32_t n = 0;
      try {
        n = frame_length(self->header_);
      } catch (const ProtocolError&) {
        return self->close();
      }
      self->read_body(n);
    });
  }

  // Reads a stranger's first bytes until they are a TCPStore client's
  // opening (tcpstore_wire.h: torch 2.x's VALIDATE, torch 1.13's first
  // request), or cannot be, or 2 s pass; then closes the connection, after
  // naming a TCPStore client to on_tcpstore_client.
  void read_stranger(std::string first) {
    bool need_more = false;
    const auto torch = tcpstore::client_of(first, need_more);
    if (torch != tcpstore::Dialect::Unknown) {
      boost::system::error_code ec;
      const auto peer = socket_.remote_endpoint(ec);
      // An IPv4 client of the dual-stack socket as users write it (not ::ffff:a.b.c.d).
      auto address = peer.address();
      if (address.is_v6() && address.to_v6().is_v4_mapped())
        address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
      if (!ec && table_.on_tcpstore_client)
        table_.on_tcpstore_client(address.to_string(), torch == tcpstore::Dialect::Torch2 ? "2.x" : "1.x");
      return close();
    }
    if (!need_more || first.size() >= 4096) return close();
    if (first.size() == 4) {  // the first wait: bounded
      timer_.expires_after(std::chrono::seconds(2));
      timer_.async_wait([self = shared_from_this()](auto ec) {
        if (!ec) self->close();
      });
    }
    stranger_ = std::move(first);
    socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](auto ec, std::size_t n) {
      if (ec) return self->close();
      self->stranger_.append(self->chunk_, n);
      self->read_stranger(std::move(self->stranger_));
    });
  }

  void read_body(std::uint32_t n) {
    body_.assign(n, '\0');
    asio::async_read(socket_, asio::buffer(body_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->close();
      try {
        self->handle();
      } catch (const ProtocolError&) {
        self->close();
      }
    });
  }

  static Writer ok() { return std::move(Writer().u8(static_cast<std::uint8_t>(Status::Ok))); }
  static Writer status(Status s) { return std::move(Writer().u8(static_cast<std::uint8_t>(s))); }

  void handle() {
    Reader in(body_);
    const auto op = static_cast<Op>(in.u8());
    if (!greeted_) {
      if (op != Op::Hello || in.str() != kMagic) throw ProtocolError("no hello");
      const std::uint32_t theirs = in.u32();
      in.str();  // the client's launcher version (its own messages name it)
      in.end();
      greeted_ = true;
      const std::uint32_t mine = table_.version;
      return send(status(theirs == mine ? Status::Ok : Status::Version).str(kMagic).u32(mine).str(table_.launcher_version));
    }
    auto& values = table_.values;
    switch (op) {
      case Op::Set: {
        std::string key = in.str();
        std::string value = in.str();
        in.end();
        if (auto why = table_.refusal({{key, value}}); !why.empty()) return send(status(Status::Error).str(why));
        table_.put(key, std::move(value));
        return send(ok());
      }
      case Op::Get:
      case Op::Wait: {
        std::string key = in.str();
        const auto timeout = std::chrono::milliseconds(in.i64());
        in.end();
        auto it = values.find(key);
        if (it != values.end()) return send(op == Op::Get ? ok().str(it->second) : ok());
        auto entry = table_.waiters.emplace(key, weak_from_this());
        waiting_ = Waiting{op, std::move(key), ++waits_, entry};
        timer_.expires_after(timeout);
        // A timeout already queued when the key came is stale: the wait it
        // belonged to was answered (and another may have begun since).
        timer_.async_wait([self = shared_from_this(), wait = waits_](auto ec) {
          if (ec || !self->waiting_ || self->waiting_->id != wait) return;
          self->stop_waiting();
          self->send(status(Status::Timeout));
        });
        return;
      }
      case Op::TryGet: {
        const std::string key = in.str();
        in.end();
        auto it = values.find(key);
        return send(it == values.end() ? status(Status::Absent) : ok().str(it->second));
      }
      case Op::Add: {
        const std::string key = in.str();
        const long long delta = in.i64();
        in.end();
        auto it = values.find(key);
        const auto before = it == values.end() ? std::optional<long long>(0) : integer(it->second);
        if (!before)
          return send(status(Status::Error).str(not_a_number(key, it->second)));
        std::string sum = std::to_string(*before + delta);
        if (auto why = table_.refusal({{key, sum}}); !why.empty()) return send(status(Status::Error).str(why));
        table_.put(key, std::move(sum));
        return send(ok().i64(*before + delta));
      }
      case Op::Check: {
        const std::string key = in.str();
        in.end();
        return send(ok().u8(values.count(key) ? 1 : 0));
      }
      case Op::CompareSet: {
        const std::string key = in.str();
        const std::string expected = in.str();
        std::string desired = in.str();
        in.end();
        auto it = values.find(key);
        const bool swap = it == values.end() ? expected.empty() : it->second == expected;
        if (swap) {
          if (auto why = table_.refusal({{key, desired}}); !why.empty()) return send(status(Status::Error).str(why));
          table_.put(key, std::move(desired));
        }
        it = values.find(key);
        return send(ok().str(it == values.end() ? std::string() : it->second));
      }
      case Op::MultiGet: {
        const std::uint32_t n = in.u32();
        Writer reply = ok();
        reply.u32(n);
        for (std::uint32_t i = 0; i < n; ++i) {
          const auto it = values.find(in.str());
          if (it == values.end()) reply.u8(0);
          else reply.u8(1).str(it->second);
        }
        in.end();
        return send(reply);
      }
      case Op::MultiSet: {
        const std::uint32_t n = in.u32();
        std::vector<std::pair<std::string, std::string>> entries;
        for (std::uint32_t i = 0; i < n; ++i) {
          std::string key = in.str();
          entries.emplace_back(std::move(key), in.str());
        }
        in.end();
        // All or nothing: a refused request changes nothing.
        if (!entries.empty())
          if (auto why = table_.refusal(entries); !why.empty()) return send(status(Status::Error).str(why));
        for (auto& [key, value] : entries) table_.put(key, std::move(value));
        return send(ok());
      }
      case Op::Hello:
        break;
    }
    throw ProtocolError("unknown op");
  }

  void send(const Writer& reply) {
    out_ = reply.frame();
    asio::async_write(socket_, asio::buffer(out_), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec) return self->close();
      self->read_header();
    });
  }

  void close() {
    stop_waiting();
    timer_.cancel();
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  Table& table_;
  unsigned char header_[4] = {};
  std::string stranger_;  // a connection's first bytes that are no hello
  char chunk_[512];
  std::string body_;
  std::string out_;
  bool greeted_ = false;
  std::optional<Waiting> waiting_;
  std::uint64_t waits_ = 0;
};

void Table::changed(const std::string& key) {
  auto [first, last] = waiters.equal_range(key);
  std::vector<std::shared_ptr<Connection>> woken;
  for (auto it = first; it != last; ++it)
    if (auto c = it->second.lock()) woken.push_back(std::move(c));
  waiters.erase(first, last);
  for (auto& c : woken) c->key_changed();
}

}  // namespace

struct StoreServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  int port = 0;  // read before the thread starts: the acceptor is the thread's
  Table table;
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](auto ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Connection>(std::move(socket), table)->start();
      }
      accept();
    });
  }

};

StoreServer::StoreServer(int port, std::string launcher_version, Caps caps, TcpStoreClient on_tcpstore_client)
    : impl_(std::make_unique<Impl>()) {
  impl_->table.launcher_version = std::move(launcher_version);
  impl_->table.caps = caps;
  impl_->table.on_tcpstore_client = std::move(on_tcpstore_client);
  ddp::listen_on_every_address(impl_->acceptor, static_cast<unsigned short>(port));
  impl_->port = impl_->acceptor.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

StoreServer::~StoreServer() {
  impl_->io.stop();
  impl_->thread.join();
}

int StoreServer::port() const { return impl_->port; }

void StoreServer::speak_version_for_tests(std::uint32_t version) { impl_->table.version = version; }

std::size_t StoreServer::waits_listed_for_tests() {
  std::promise<std::size_t> n;
  asio::post(impl_->io, [&] { n.set_value(impl_->table.waiters.size()); });
  return n.get_future().get();
}

}  // namespace ddp::rdzv
