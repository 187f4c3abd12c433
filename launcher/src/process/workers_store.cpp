#include "ddp/launcher/process/workers_store.h"

#include "ddp/common/listen_any.h"
#include "ddp/common/untrusted_text.h"

#include <boost/asio.hpp>

#include <array>
#include <fcntl.h>
#include <csignal>
#include <deque>
#include <future>
#include <optional>
#include <pthread.h>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace ddp::launcher {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace tcpstore;

namespace {

class Connection;

// The table, who waits for which key, every open connection. Touched only
// by the store's thread.
struct Table {
  const WorkersStoreOptions& opts;
  std::unordered_map<std::string, std::string> values;
  std::size_t bytes = 0;
  std::size_t buffered = 0;  // bytes of requests read and not yet served, all connections
  std::unordered_map<std::string, std::vector<std::shared_ptr<Connection>>> waiters;
  std::unordered_set<std::shared_ptr<Connection>> open;
  int logged = 0;

  explicit Table(const WorkersStoreOptions& o) : opts(o) {}

  void log(const std::string& line) {
    if (!opts.log || logged > WorkersStore::kMaxLogLines) return;
    ++logged;
    // Lines quote what clients sent (keys): control bytes escaped, never raw
    // on the terminal.
    opts.log(logged > WorkersStore::kMaxLogLines ? "the workers' store: more refused clients, not shown"
                                                 : ddp::visible_text(line));
  }
  // False when the table would pass its cap.
  bool set(const std::string& key, std::string value);
  void woken(const std::string& key);
};

// One client: reads requests as they come (no framing), answers each in
// order, and a WAIT when its keys are all there.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, Table& table)
      : socket_(std::move(socket)), deadline_(socket_.get_executor()), table_(table) {
    boost::system::error_code ec;
    const auto peer = socket_.remote_endpoint(ec);
    peer_ = ec ? "?" : peer.address().to_string() + ":" + std::to_string(peer.port());
  }

  void start() { read(); }

  void close() {
    if (closed_) return;
    closed_ = true;
    table_.buffered -= in_.size();
    in_.clear();
    stop_waiting();
    deadline_.cancel();
    boost::system::error_code ignored;
    socket_.close(ignored);
    table_.open.erase(shared_from_this());
  }

  // One of the keys this connection waits for was set.
  void key_set() {
    if (awaited_ == 0 || --awaited_ > 0) return;
    waited_.clear();
    send(reply_u8(kStopWaiting));
  }

 private:
  void refuse(const std::string& why) {
    table_.log("the workers' store closed the connection of " + peer_ + ": " + why);
    close();
  }

  void read() {
    if (closed_ || reading_) return;
    // A client that does not read its replies is not read either.
    if (pending_ > table_.opts.max_pending_reply_bytes) return;
    reading_ = true;
    socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](auto ec, std::size_t n) {
      self->reading_ = false;
      if (ec || self->closed_) return self->close();
      self->in_.append(self->chunk_.data(), n);
      self->table_.buffered += n;
      // Many clients each half way through a large request: bounded together.
      if (self->table_.buffered > self->table_.opts.max_buffered_bytes)
        return self->refuse("the store's unfinished requests would hold more than " +
                            std::to_string(self->table_.opts.max_buffered_bytes) + " bytes");
      self->serve();
      self->read();
    });
  }

  void serve() {
    std::size_t at = 0;
    // A client that does not read its replies is not served either: what it
    // sent waits in in_ (under the request deadline) until they drain.
    while (!closed_ && pending_ <= table_.opts.max_pending_reply_bytes) {
      Request r;
      std::size_t used = 0;
      std::string why;
      const Parsed p = parse(std::string_view(in_).substr(at), dialect_, table_.opts.limits, r, used, why);
      if (p == Parsed::Bad) return refuse(why);
      if (p == Parsed::NeedMore) break;
      at += used;
      handle(r);
    }
    if (closed_) return;
    in_.erase(0, at);
    table_.buffered -= at;
    // A request begun must be finished in time: a client that sends half of
    // one and stalls holds no buffer for ever.
    if (in_.empty()) {
      deadline_.cancel();
      armed_ = false;
    } else if (!armed_) {
      armed_ = true;
      deadline_.expires_after(table_.opts.request_timeout);
      deadline_.async_wait([self = shared_from_this()](auto ec) {
        if (ec || !self->armed_ || self->closed_) return;
        self->refuse("a request begun but not finished within " +
                     std::to_string(self->table_.opts.request_timeout.count()) + " ms (" +
                     std::to_string(self->in_.size()) + " bytes of it came)");
      });
    }
  }

  void handle(Request& r) {
    auto& values = table_.values;
    switch (r.op) {
      case Op::Validate:
        return;
      case Op::Set:
      case Op::Append: {
        std::string v = std::move(r.values[0]);
        if (r.op == Op::Append) {
          auto it = values.find(r.keys[0]);
          if (it != values.end()) v = it->second + v;
        }
        if (!table_.set(r.keys[0], std::move(v))) return full(r);
        return;
      }
      case Op::MultiSet:
        for (std::size_t i = 0; i < r.keys.size(); ++i)
          if (!table_.set(r.keys[i], std::move(r.values[i]))) return full(r);
        return;
      case Op::CompareSet: {
        // As torch's: absent and expected empty, or present and equal: set.
        // Absent with an expected value answers the expected value.
        auto it = values.find(r.keys[0]);
        if (it == values.end()) {
          if (!r.values[0].empty()) return send(reply_bytes(r.values[0]));
          if (!table_.set(r.keys[0], r.values[1])) return full(r);
          return send(reply_bytes(r.values[1]));
        }
        if (it->second == r.values[0] && !table_.set(r.keys[0], std::move(r.values[1]))) return full(r);
        return send(reply_bytes(values.find(r.keys[0])->second));
      }
      case Op::Get:
      case Op::MultiGet: {
        // Clients wait for a key before they get it: an absent one is a
        // client's mistake, closed as torch's store closes it.
        std::string out;
        for (const auto& k : r.keys) {
          auto it = values.find(k);
          if (it == values.end()) return refuse(std::string(op_name(r.op)) + " of key '" + k + "', which is not set");
          out += reply_bytes(it->second);
        }
        return send(std::move(out));
      }
      case Op::Add: {
        long long now = 0;
        auto it = values.find(r.keys[0]);
        if (it != values.end()) {
          try {
            std::size_t used = 0;
            now = std::stoll(it->second, &used);
            if (used != it->second.size()) throw std::invalid_argument("trailing");
          } catch (const std::exception&) {
            return refuse("ADD to key '" + r.keys[0] + "', whose value is not a number");
          }
        }
        now += r.number;
        if (!table_.set(r.keys[0], std::to_string(now))) return full(r);
        return send(reply_i64(now));
      }
      case Op::Check: {
        bool all = true;
        for (const auto& k : r.keys) all = all && values.count(k);
        return send(reply_u8(all ? kReady : kNotReady));
      }
      case Op::Wait: {
        stop_waiting();
        for (const auto& k : r.keys)
          if (!values.count(k)) {
            table_.waiters[k].push_back(shared_from_this());
            waited_.push_back(k);
            ++awaited_;
          }
        if (awaited_ == 0) send(reply_u8(kStopWaiting));
        return;
      }
      case Op::GetNumKeys:
        return send(reply_i64(static_cast<std::int64_t>(values.size())));
      case Op::DeleteKey: {
        auto it = values.find(r.keys[0]);
        if (it == values.end()) return send(reply_i64(0));
        table_.bytes -= it->first.size() + it->second.size();
        values.erase(it);
        return send(reply_i64(1));
      }
      case Op::CancelWait:
        stop_waiting();
        return send(reply_u8(kWaitCanceled));
      case Op::Ping:
        return send(reply_u32(r.nonce));
    }
  }

  void full(const Request& r) {
    refuse(std::string(op_name(r.op)) + " of key '" + r.keys[0] + "' would make the table hold more than " +
           std::to_string(table_.opts.max_table_bytes) + " bytes");
  }

  // Forgets this connection's wait (answered, canceled, or closed).
  void stop_waiting() {
    for (const auto& k : waited_) {
      auto it = table_.waiters.find(k);
      if (it == table_.waiters.end()) continue;
      auto& v = it->second;
      for (auto w = v.begin(); w != v.end(); ++w)
        if (w->get() == this) {
          v.erase(w);
          break;
        }
      if (v.empty()) table_.waiters.erase(it);
    }
    waited_.clear();
    awaited_ = 0;
  }

  void send(std::string bytes) {
    if (closed_) return;
    pending_ += bytes.size();
    out_.push_back(std::move(bytes));
    if (out_.size() == 1) write();
  }

  void write() {
    asio::async_write(socket_, asio::buffer(out_.front()), [self = shared_from_this()](auto ec, std::size_t) {
      if (ec || self->closed_) return self->close();
      self->pending_ -= self->out_.front().size();
      self->out_.pop_front();
      if (!self->out_.empty()) self->write();
      // Serving and reading again if they had stopped for the replies.
      self->serve();
      self->read();
    });
  }

  tcp::socket socket_;
  asio::steady_timer deadline_;
  Table& table_;
  std::string peer_;
  Dialect dialect_ = Dialect::Unknown;
  // Per connection: 16 KiB x max_connections bounds the read buffers.
  std::array<char, 16 << 10> chunk_{};
  std::string in_;
  std::deque<std::string> out_;
  std::size_t pending_ = 0;
  std::vector<std::string> waited_;
  std::size_t awaited_ = 0;
  bool reading_ = false;
  bool armed_ = false;
  bool closed_ = false;
};

bool Table::set(const std::string& key, std::string value) {
  auto it = values.find(key);
  const std::size_t before = it == values.end() ? 0 : key.size() + it->second.size();
  const std::size_t after = key.size() + value.size();
  if (bytes - before + after > opts.max_table_bytes) return false;
  bytes = bytes - before + after;
  if (it == values.end()) values.emplace(key, std::move(value));
  else it->second = std::move(value);
  woken(key);
  return true;
}

void Table::woken(const std::string& key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  auto woken = std::move(it->second);
  waiters.erase(it);
  for (auto& c : woken) c->key_set();
}

// Asio opens and accepts without SOCK_CLOEXEC: without this every worker
// spawned later held the listening socket and copies of the other workers'
// connections (a standby process, standby.h, then found those numbers taken
// when the launcher reused them). A spawn between accept and this call can
// still inherit one connection; its use is the same as before.
void close_on_exec(int fd) { ::fcntl(fd, F_SETFD, FD_CLOEXEC); }

}  // namespace

struct WorkersStore::Impl {
  WorkersStoreOptions opts;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};
  Table table{opts};
  int port = 0;
  std::thread thread;

  explicit Impl(WorkersStoreOptions o) : opts(std::move(o)) {}

  void accept() {
    acceptor.async_accept([this](auto ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of fds (EMFILE): the others keep being served; try again soon
        // rather than spin on the same error.
        table.log(std::string("the workers' store could not accept a connection: ") + ec.message());
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this](auto e) {
          if (!e) accept();
        });
        return;
      }
      if (table.open.size() >= opts.max_connections) {
        table.log("the workers' store refused a connection: " + std::to_string(table.open.size()) +
                  " are open, its limit");
        boost::system::error_code ignored;
        socket.close(ignored);
      } else {
        boost::system::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        close_on_exec(socket.native_handle());
        auto c = std::make_shared<Connection>(std::move(socket), table);
        table.open.insert(c);
        c->start();
      }
      accept();
    });
  }

  // Runs f on the store's thread and waits for it.
  template <typename F>
  auto on_thread(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    asio::post(io, [&task] { task(); });
    return result.get();
  }

  void close_all() {
    auto open = table.open;  // close() erases from the set
    for (const auto& c : open) c->close();
    table.values.clear();
    table.waiters.clear();
    table.bytes = 0;
    table.buffered = 0;
  }
};

WorkersStore::WorkersStore(WorkersStoreOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {
  try {
    listen_on_every_address(impl_->acceptor, static_cast<unsigned short>(impl_->opts.port));
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("cannot host the workers' store on port " + std::to_string(impl_->opts.port) + ": " +
                             e.code().message() + "; pick a free --master_port (0: any free port)");
  }
  impl_->port = impl_->acceptor.local_endpoint().port();
  close_on_exec(impl_->acceptor.native_handle());
  impl_->accept();
  // The store's thread takes no signal: the launcher's signals are its main
  // thread's (signals.h).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  impl_->thread = std::thread([this] { impl_->io.run(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

WorkersStore::~WorkersStore() {
  asio::post(impl_->io, [this] {
    boost::system::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->retry.cancel();
    impl_->close_all();
    impl_->io.stop();
  });
  impl_->thread.join();
}

int WorkersStore::port() const { return impl_->port; }

void WorkersStore::new_attempt() {
  impl_->on_thread([this] { impl_->close_all(); });
}

std::size_t WorkersStore::keys_for_tests() const {
  return impl_->on_thread([this] { return impl_->table.values.size(); });
}

std::size_t WorkersStore::connections_for_tests() const {
  return impl_->on_thread([this] { return impl_->table.open.size(); });
}

}  // namespace ddp::launcher
