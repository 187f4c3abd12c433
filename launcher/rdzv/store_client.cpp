#include "store_client.h"

#include "store_protocol.h"

#include <cstdio>

#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace ddp::rdzv {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace wire;

namespace {

std::string seconds_of(std::chrono::milliseconds ms) {
  const long long s = (ms.count() + 999) / 1000;
  return std::to_string(s) + " s";
}

Writer request(Op op) { return std::move(Writer().u8(static_cast<std::uint8_t>(op))); }

}  // namespace

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds connect_timeout,
                         std::chrono::milliseconds io_timeout, const std::string& launcher_version)
    : endpoint_((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port)),
      io_timeout_(io_timeout) {
  const auto deadline = Clock::now() + connect_timeout;
  tcp::resolver resolver(io_);
  boost::system::error_code ec;
  const auto addresses = resolver.resolve(host, std::to_string(port), ec);
  if (ec) throw StoreError("cannot resolve " + host + ": " + ec.message());
  boost::system::error_code connected = asio::error::would_block;
  asio::async_connect(socket_, addresses, [&](auto e, const tcp::endpoint&) { connected = e; });
  run_until(deadline, "connecting");
  if (connected) fail("cannot connect: " + connected.message());
  socket_.set_option(tcp::no_delay(true), ec);

  const std::string hello = request(Op::Hello).str(kMagic).u32(kVersion).str(launcher_version).frame();
  std::string answer;
  try {
    boost::system::error_code sent = asio::error::would_block;
    asio::async_write(socket_, asio::buffer(hello), [&](auto e, std::size_t) { sent = e; });
    run_until(deadline, "greeting it");
    if (sent) fail("sending hello: " + sent.message());
    answer = read_frame(deadline, "its answer to hello");
  } catch (const StoreError& e) {
    throw ForeignStore("it accepts connections but does not answer as a ddp-launch rendezvous store (" +
                       std::string(e.what()) + ")");
  }
  try {
    Reader in(answer);
    const auto status = static_cast<Status>(in.u8());
    if (in.str() != kMagic) throw ProtocolError("another magic");
    const std::uint32_t theirs = in.u32();
    store_version_ = in.str();
    if (status == Status::Version)
      throw OtherVersionStore("it is the rendezvous store of ddp-launch " + store_version_ + ", protocol version " +
                         std::to_string(theirs) + "; this node runs ddp-launch " + launcher_version +
                         ", protocol version " + std::to_string(kVersion));
    if (status != Status::Ok) throw ProtocolError("status " + std::to_string(static_cast<int>(status)));
  } catch (const ProtocolError& e) {
    throw ForeignStore(std::string("it answers hello in another protocol (") + e.what() + ")");
  }
}

void StoreClient::refused_unless_ok(const std::string& body) {
  Reader in(body);
  const auto status = static_cast<Status>(in.u8());
  if (status == Status::Ok) return;
  std::string why = "status " + std::to_string(static_cast<int>(status));
  try {
    if (status == Status::Error) why = in.str();
  } catch (const ProtocolError&) {
  }
  throw StoreRefused(why);
}

void StoreClient::fail(const std::string& why) {
  boost::system::error_code ignored;
  socket_.close(ignored);
  throw StoreError(why);
}

void StoreClient::run_until(Clock::time_point deadline, const std::string& what) {
  io_.restart();
  io_.run_until(deadline);
  if (io_.stopped()) return;  // the operation completed
  boost::system::error_code ignored;
  socket_.close(ignored);
  io_.run();  // lets the cancelled operation finish
  throw StoreError("no answer within the timeout while " + what);
}

std::string StoreClient::read_frame(Clock::time_point deadline, const std::string& what) {
  if (!socket_.is_open()) throw StoreError("the connection was closed by an earlier error");
  unsigned char header[4];
  boost::system::error_code ec = asio::error::would_block;
  asio::async_read(socket_, asio::buffer(header), [&](auto e, std::size_t) { ec = e; });
  run_until(deadline, "reading " + what);
  if (ec == asio::error::eof) fail("the store closed the connection");
  if (ec) fail("reading " + what + ": " + ec.message());
  std::uint32_t n = 0;
  try {
    n = frame_length(header);
  } catch (const ProtocolError& e) {
    fail(e.what());
  }
  std::string body(n, '\0');
  ec = asio::error::would_block;
  asio::async_read(socket_, asio::buffer(body), [&](auto e, std::size_t) { ec = e; });
  run_until(deadline, "reading " + what);
  if (ec) fail("reading " + what + ": " + ec.message());
  return body;
}

std::string StoreClient::transact(const std::string& frame, std::chrono::milliseconds wait, const std::string& what) {
  if (!socket_.is_open()) throw StoreError("the connection to " + endpoint_ + " was closed by an earlier error");
  const auto start = Clock::now();
  const auto deadline = start + wait + io_timeout_;
  try {
    boost::system::error_code ec = asio::error::would_block;
    asio::async_write(socket_, asio::buffer(frame), [&](auto e, std::size_t) { ec = e; });
    run_until(deadline, what);
    if (ec) fail(what + ": " + ec.message());
    return read_frame(deadline, "the answer to " + what);
  } catch (const StoreError& e) {
    // The time it took to notice, not the most it could have taken: a
    // closed connection is seen at once (issue 51 item 11).
    char took[32];
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::snprintf(took, sizeof(took), s < 10 ? "%.2f s" : "%.0f s", s);
    throw StoreLost(endpoint_, std::string(e.what()) + " (after " + took + ")");
  }
}

void StoreClient::set(const std::string& key, const std::string& value) {
  const std::string body = transact(request(Op::Set).str(key).str(value).frame(), {}, "setting " + key);
  refused_unless_ok(body);
}

std::string StoreClient::get(const std::string& key) {
  const std::string body = transact(request(Op::Get).str(key).i64(io_timeout_.count()).frame(), io_timeout_,
                                    "waiting for " + key);
  Reader in(body);
  if (static_cast<Status>(in.u8()) != Status::Ok)
    throw StoreError("the rendezvous store at " + endpoint_ + ": key " + key + " was not set within " +
                     seconds_of(io_timeout_));
  return in.str();
}

std::optional<std::string> StoreClient::try_get(const std::string& key) {
  const std::string body = transact(request(Op::TryGet).str(key).frame(), {}, "reading " + key);
  Reader in(body);
  if (static_cast<Status>(in.u8()) == Status::Absent) return std::nullopt;
  return in.str();
}

long long StoreClient::add(const std::string& key, long long delta) {
  const std::string body = transact(request(Op::Add).str(key).i64(delta).frame(), {}, "adding to " + key);
  Reader in(body);
  if (static_cast<Status>(in.u8()) != Status::Ok) throw StoreRefused(in.str());
  return in.i64();
}

bool StoreClient::check(const std::string& key) {
  const std::string body = transact(request(Op::Check).str(key).frame(), {}, "checking " + key);
  Reader in(body);
  in.u8();
  return in.u8() != 0;
}

std::string StoreClient::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  const std::string body = transact(request(Op::CompareSet).str(key).str(expected).str(desired).frame(), {}, "setting " + key);
  Reader in(body);
  if (static_cast<Status>(in.u8()) != Status::Ok) refused_unless_ok(body);
  return in.str();
}

bool StoreClient::wait(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string body = transact(request(Op::Wait).str(key).i64(timeout.count()).frame(), timeout, "waiting for " + key);
  Reader in(body);
  return static_cast<Status>(in.u8()) == Status::Ok;
}

std::vector<std::optional<std::string>> StoreClient::multi_get(const std::vector<std::string>& keys) {
  Writer w = request(Op::MultiGet);
  w.u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  const std::string body = transact(w.frame(), {}, "reading " + std::to_string(keys.size()) + " keys");
  Reader in(body);
  if (static_cast<Status>(in.u8()) != Status::Ok)
    throw StoreError("the rendezvous store at " + endpoint_ + " refused to read " + std::to_string(keys.size()) + " keys");
  std::vector<std::optional<std::string>> out(in.u32());
  if (out.size() != keys.size()) throw StoreError("the rendezvous store at " + endpoint_ + " answered for other keys");
  for (auto& v : out)
    if (in.u8()) v = in.str();
  return out;
}

void StoreClient::multi_set(const std::vector<std::pair<std::string, std::string>>& entries) {
  Writer w = request(Op::MultiSet);
  w.u32(static_cast<std::uint32_t>(entries.size()));
  for (const auto& [k, v] : entries) w.str(k).str(v);
  refused_unless_ok(transact(w.frame(), {}, "setting " + std::to_string(entries.size()) + " keys"));
}

}  // namespace ddp::rdzv
