#include "etcd_gateway.h"

#include "ddp/common/ptree_json.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/beast/http.hpp>

namespace ddp::rdzv {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::property_tree::ptree;

namespace {

std::string seconds_of(std::chrono::milliseconds ms) {
  std::ostringstream o;
  o << static_cast<double>(ms.count()) / 1000 << " s";
  return o.str();
}

// A try that ran out of its time (the member is slow or unreachable).
struct Slow : StoreError {
  using StoreError::StoreError;
};

http::request<http::string_body> request_of(const std::string& host, const std::string& path, const std::string& body) {
  http::request<http::string_body> req{http::verb::post, path, 11};
  req.set(http::field::host, host);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  return req;
}

// etcd's errors that an election causes (no leader yet, leader changed,
// request timed out while it ran): the next member, or the same one a
// moment later, answers.
bool election_error(const ptree& answer) {
  const int code = answer.get<int>("code", 0);
  return code == 14 || code == 4 || code == 2 || code == 10;
}

}  // namespace

std::string EtcdGateway::Member::name() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::vector<EtcdGateway::Member> EtcdGateway::parse_members(const std::string& text) {
  std::vector<Member> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    Member m;
    std::string port;
    if (item[0] == '[') {
      const auto close = item.find(']');
      if (close == std::string::npos) throw std::invalid_argument("'" + item + "': no ']' after the IPv6 address");
      m.host = item.substr(1, close - 1);
      if (close + 1 < item.size()) {
        if (item[close + 1] != ':') throw std::invalid_argument("'" + item + "': expected ':PORT' after ']'");
        port = item.substr(close + 2);
      }
    } else if (const auto c = item.find(':'); c != std::string::npos && item.find(':', c + 1) == std::string::npos) {
      m.host = item.substr(0, c);
      port = item.substr(c + 1);
    } else {
      m.host = item;
    }
    if (m.host.empty()) throw std::invalid_argument("'" + item + "': no host");
    if (!port.empty()) {
      char* end = nullptr;
      const long p = std::strtol(port.c_str(), &end, 10);
      if (*end != '\0' || p < 1 || p > 65535)
        throw std::invalid_argument("'" + item + "': port '" + port + "' is not a number from 1 to 65535");
      m.port = static_cast<int>(p);
    }
    out.push_back(m);
  }
  if (out.empty()) throw std::invalid_argument("no endpoint given");
  return out;
}

EtcdGateway::EtcdGateway(std::vector<Member> members, std::chrono::milliseconds try_timeout)
    : members_(std::move(members)), try_timeout_(try_timeout) {
  if (members_.empty()) throw std::invalid_argument("no etcd endpoint given");
}

std::string EtcdGateway::all() const {
  std::string s;
  for (const auto& m : members_) s += (s.empty() ? "" : ",") + m.name();
  return s;
}

void EtcdGateway::run_until(Clock::time_point until, const std::string& what, tcp::socket& s) {
  io_.restart();
  io_.run_until(until);
  if (io_.stopped()) return;  // the operation completed
  boost::system::error_code ignored;
  s.close(ignored);  // cancels it
  io_.restart();
  io_.run();
  throw Slow("no answer within " + seconds_of(try_timeout_) + " (" + what + ")");
}

void EtcdGateway::connect(tcp::socket& s, const Member& m, Clock::time_point until) {
  tcp::resolver resolver(io_);
  boost::system::error_code ec;
  const auto addresses = resolver.resolve(m.host, std::to_string(m.port), ec);
  if (ec) throw StoreError("cannot resolve " + m.host + ": " + ec.message());
  boost::system::error_code connected = asio::error::would_block;
  asio::async_connect(s, addresses, [&](auto e, const tcp::endpoint&) { connected = e; });
  run_until(until, "connecting", s);
  if (connected) {
    boost::system::error_code ignored;
    s.close(ignored);
    throw StoreError(connected.message());
  }
  s.set_option(tcp::no_delay(true), ec);
}

void EtcdGateway::next_member() {
  boost::system::error_code ignored;
  socket_.close(ignored);
  buffer_.clear();
  current_ = (current_ + 1) % members_.size();
}

ptree EtcdGateway::try_post(const std::string& path, const std::string& body, Clock::time_point until) {
  const Member& m = members_.at(current_);
  if (!socket_.is_open()) {
    buffer_.clear();
    connect(socket_, m, until);
  }
  auto req = request_of(m.name(), path, body);
  boost::system::error_code sent = asio::error::would_block;
  http::async_write(socket_, req, [&](auto e, std::size_t) { sent = e; });
  run_until(until, "sending " + path, socket_);
  if (sent) throw StoreError("sending: " + sent.message());
  http::response<http::string_body> res;
  boost::system::error_code got = asio::error::would_block;
  http::async_read(socket_, buffer_, res, [&](auto e, std::size_t) { got = e; });
  run_until(until, "waiting for the answer to " + path, socket_);
  if (got) throw StoreError("reading the answer: " + got.message());
  if (!res.keep_alive()) {
    boost::system::error_code ignored;
    socket_.close(ignored);
  }
  ptree answer;
  try {
    std::istringstream in(res.body());
    boost::property_tree::read_json(in, answer);
  } catch (const std::exception&) {
    const std::string b = res.body().substr(0, 80);
    throw NotEtcd("it answers HTTP " + std::to_string(res.result_int()) + " to " + path +
                  " without JSON ('" + b + "'): not etcd 3.4 or later (its /v3 gateway)");
  }
  if (answer.get_child_optional("header")) return answer;
  if (answer.get_child_optional("error") || answer.get_child_optional("code")) {
    const std::string why = answer.get<std::string>("message", answer.get<std::string>("error", "?"));
    if (election_error(answer)) throw StoreError("etcd: " + why);
    throw NotEtcd("etcd refused " + path + ": " + why);
  }
  throw NotEtcd("it answers " + path + " with JSON that is not etcd's (no header)");
}

ptree EtcdGateway::post(const std::string& path, const std::string& body, Clock::time_point deadline) {
  std::vector<std::string> why(members_.size());
  std::size_t tried = 0;
  while (true) {
    const auto now = Clock::now();
    const auto until = std::min(deadline, now + try_timeout_);
    try {
      return try_post(path, body, until);
    } catch (const NotEtcd& e) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      throw NotEtcd("the etcd endpoint " + members_.at(current_).name() + ": " + e.what());
    } catch (const StoreError& e) {
      // A try the request's deadline cut short says less than the
      // member's last whole try.
      const bool cut = until == deadline && dynamic_cast<const Slow*>(&e);
      if (!cut || why.at(current_).empty()) why.at(current_) = e.what();
      next_member();
      ++tried;
    }
    if (Clock::now() >= deadline) {
      std::string s;
      for (std::size_t i = 0; i < members_.size(); ++i)
        if (!why[i].empty()) s += (s.empty() ? "" : "; ") + members_[i].name() + ": " + why[i];
      throw StoreError("no etcd member answered " + path + " in time (" + s + ")");
    }
    // A whole round of members failed: wait a moment (an election takes
    // about one election timeout), never past the deadline.
    if (tried % members_.size() == 0)
      std::this_thread::sleep_until(std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
}

bool EtcdGateway::stream(const std::string& path, const std::string& body, Clock::time_point deadline,
                         const std::function<bool(const std::string&)>& until_seen) {
  // A connection of its own: the stream ends only when this side closes it.
  const Member& m = members_.at(current_);
  tcp::socket s(io_);
  boost::beast::flat_buffer buf;
  try {
    connect(s, m, std::min(deadline, Clock::now() + try_timeout_));
    auto req = request_of(m.name(), path, body);
    boost::system::error_code sent = asio::error::would_block;
    http::async_write(s, req, [&](auto e, std::size_t) { sent = e; });
    run_until(std::min(deadline, Clock::now() + try_timeout_), "sending " + path, s);
    if (sent) throw StoreError("sending: " + sent.message());
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    boost::system::error_code got = asio::error::would_block;
    http::async_read_header(s, buf, parser, [&](auto e, std::size_t) { got = e; });
    run_until(std::min(deadline, Clock::now() + try_timeout_), "waiting for the watch", s);
    if (got) throw StoreError("reading the watch: " + got.message());
    if (parser.get().result_int() != 200)
      throw NotEtcd("it answers HTTP " + std::to_string(parser.get().result_int()) + " to " + path +
                    ": not etcd 3.4 or later (its /v3 gateway)");
    while (!until_seen(parser.get().body())) {
      if (Clock::now() >= deadline) return false;
      got = asio::error::would_block;
      http::async_read_some(s, buf, parser, [&](auto e, std::size_t) { got = e; });
      try {
        run_until(deadline, "watching", s);
      } catch (const Slow&) {
        return until_seen(parser.get().body());
      }
      if (got) throw StoreError("the watch broke: " + got.message());
    }
    boost::system::error_code ignored;
    s.close(ignored);
    return true;
  } catch (const NotEtcd& e) {
    throw NotEtcd("the etcd endpoint " + m.name() + ": " + e.what());
  } catch (const StoreError& e) {
    next_member();  // the next request goes to another member
    throw StoreError(m.name() + ": " + e.what());
  }
}

}  // namespace ddp::rdzv
