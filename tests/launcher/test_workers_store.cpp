// The workers' store (process/workers_store.h) and its wire format
// (ddp/common/tcpstore_wire.h), in process: a tiny hand-written TCPStore client
// speaks torch 2.x's and 1.13's dialects byte by byte, as TCPStore.cpp
// sends them, and plays the bad clients. Real torch clients are the
// scenarios' (test_workers_store_scenarios.cpp).
#include "ddp/launcher/process/workers_store.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <chrono>
#include <cstring>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace ddp::launcher;
using namespace ddp::launcher::tcpstore;

namespace {

// Request bytes, built as torch's SendBuffer builds them.
struct Bytes {
  std::string b;
  Bytes& u8(std::uint8_t v) { return raw(&v, 1); }
  Bytes& u32(std::uint32_t v) { return raw(&v, 4); }
  Bytes& u64(std::uint64_t v) { return raw(&v, 8); }
  Bytes& i64(std::int64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Bytes& raw(const void* p, std::size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
};

// One blocking client connection to the store at 127.0.0.1:port.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Client() { ::close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void send(const Bytes& b) { REQUIRE(::send(fd_, b.b.data(), b.b.size(), MSG_NOSIGNAL) == ssize_t(b.b.size())); }
  // torch 2.x's opening: VALIDATE and the magic, then PING.
  void validate() {
    send(Bytes().u8(0).u32(kValidateMagic).u8(13).u32(4242));
    CHECK(u32() == 4242);
  }
  // n bytes, or "" when the store closed the connection or nothing came in `ms`.
  std::string recv(std::size_t n, int ms = 5000) {
    std::string out;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, ms) != 1) return "";
      char buf[4096];
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) return "";
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint32_t u32() { return as<std::uint32_t>(take(4)); }
  std::int64_t i64() { return as<std::int64_t>(take(8)); }
  std::string bytes() { return take(static_cast<std::size_t>(i64())); }
  // True when the store closed this connection (within ms).
  bool closed(int ms = 5000) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return false;
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }
  bool silent(int ms) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, ms) == 0;
  }

 private:
  std::string take(std::size_t n) {
    std::string s = recv(n);
    REQUIRE(s.size() == n);
    return s;
  }
  template <typename T>
  static T as(const std::string& s) {
    T v;
    std::memcpy(&v, s.data(), sizeof v);
    return v;
  }
  int fd_ = -1;
};

// The store's log lines, kept for the checks.
struct Lines {
  std::mutex m;
  std::vector<std::string> v;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> g(m);
      v.push_back(l);
    };
  }
  std::string all() {
    std::lock_guard<std::mutex> g(m);
    std::string s;
    for (const auto& l : v) s += l + "\n";
    return s;
  }
};

WorkersStoreOptions options(Lines& lines) {
  WorkersStoreOptions o;
  o.log = lines.sink();
  return o;
}

// 2.x's op numbers (TCPStoreBackend.hpp); 1.13's are one less up to 6.
enum : std::uint8_t { SET = 1, COMPARE_SET, GET, ADD, CHECK_, WAIT, GETNUMKEYS, DELETE_KEY, APPEND, MULTI_GET,
                      MULTI_SET, CANCEL_WAIT, PING };

}  // namespace

TEST_CASE("workers store wire: a 2.x connection opens with VALIDATE, any other is 1.13's", "[workers_store]") {
  Limits l;
  Request r;
  std::size_t used = 0;
  std::string why;
  Dialect d = Dialect::Unknown;
  const std::string v2 = Bytes().u8(0).u32(kValidateMagic).b;
  CHECK(parse(std::string_view(v2).substr(0, 3), d, l, r, used, why) == Parsed::NeedMore);
  CHECK(d == Dialect::Unknown);
  REQUIRE(parse(v2, d, l, r, used, why) == Parsed::Done);
  CHECK((d == Dialect::Torch2 && r.op == Op::Validate && used == 5));
  // 1.13's first request: ADD "init/" 1 (op 3 there, GET in 2.x).
  d = Dialect::Unknown;
  const std::string add = Bytes().u8(3).str("init/").i64(1).b;
  REQUIRE(parse(add, d, l, r, used, why) == Parsed::Done);
  CHECK((d == Dialect::Torch1 && r.op == Op::Add && r.keys[0] == "init/" && r.number == 1 && used == add.size()));
  // 1.13's SET is op 0: not a VALIDATE, its key length is no magic.
  d = Dialect::Unknown;
  const std::string set = Bytes().u8(0).str("k").str("v").b;
  REQUIRE(parse(set, d, l, r, used, why) == Parsed::Done);
  CHECK((d == Dialect::Torch1 && r.op == Op::Set && r.values[0] == "v"));
  // Half a request waits for the rest.
  CHECK(parse(std::string_view(set).substr(0, set.size() - 1), d, l, r, used, why) == Parsed::NeedMore);
}

TEST_CASE("workers store wire: lengths over the limits and unknown ops are refused before any bytes", "[workers_store]") {
  Limits l;
  l.max_key = 16;
  l.max_value = 32;
  l.max_keys = 4;
  Request r;
  std::size_t used = 0;
  std::string why;
  Dialect d = Dialect::Torch2;
  CHECK(parse(Bytes().u8(SET).u64(17).b, d, l, r, used, why) == Parsed::Bad);
  CHECK_THAT(why, Catch::Contains("a key of 17 bytes, over the limit of 16"));
  CHECK(parse(Bytes().u8(SET).str("k").u64(~0ull).b, d, l, r, used, why) == Parsed::Bad);
  CHECK_THAT(why, Catch::Contains("a value of"));
  CHECK(parse(Bytes().u8(WAIT).u64(5).b, d, l, r, used, why) == Parsed::Bad);
  CHECK_THAT(why, Catch::Contains("5 keys in one request"));
  CHECK(parse(Bytes().u8(14).b, d, l, r, used, why) == Parsed::Bad);  // QUEUE_PUSH
  CHECK_THAT(why, Catch::Contains("op 14"));
  d = Dialect::Torch1;
  CHECK(parse(Bytes().u8(7).str("k").b, d, l, r, used, why) == Parsed::Bad);  // WATCH_KEY
  CHECK(parse(Bytes().u8(13).u32(1).b, d, l, r, used, why) == Parsed::Bad);  // no PING in 1.13
}

TEST_CASE("workers store: a 2.x client's set, wait, get, add, check, compare_set, multi ops, delete", "[workers_store][tsan]") {
  Lines lines;
  WorkersStore store(options(lines));
  Client c(store.port());
  c.validate();
  c.send(Bytes().u8(SET).str("/a").str("1"));
  c.send(Bytes().u8(WAIT).u64(1).str("/a"));
  CHECK(c.u8() == kStopWaiting);
  c.send(Bytes().u8(GET).str("/a"));
  CHECK(c.bytes() == "1");
  c.send(Bytes().u8(ADD).str("/a").i64(41));
  CHECK(c.i64() == 42);
  c.send(Bytes().u8(ADD).str("/n").i64(-2));
  CHECK(c.i64() == -2);
  c.send(Bytes().u8(CHECK_).u64(2).str("/a").str("/b"));
  CHECK(c.u8() == kNotReady);
  c.send(Bytes().u8(COMPARE_SET).str("/b").str("").str("x"));
  CHECK(c.bytes() == "x");
  c.send(Bytes().u8(COMPARE_SET).str("/b").str("wrong").str("y"));
  CHECK(c.bytes() == "x");
  c.send(Bytes().u8(COMPARE_SET).str("/c").str("expected").str("y"));  // absent: torch answers the expected value
  CHECK(c.bytes() == "expected");
  c.send(Bytes().u8(APPEND).str("/b").str("z"));
  c.send(Bytes().u8(MULTI_SET).u64(2).str("/m1").str("p").str("/m2").str("q"));
  c.send(Bytes().u8(MULTI_GET).u64(3).str("/b").str("/m1").str("/m2"));
  CHECK(c.bytes() == "xz");
  CHECK(c.bytes() == "p");
  CHECK(c.bytes() == "q");
  c.send(Bytes().u8(GETNUMKEYS));
  CHECK(c.i64() == 5);
  c.send(Bytes().u8(DELETE_KEY).str("/m1"));
  CHECK(c.i64() == 1);
  c.send(Bytes().u8(DELETE_KEY).str("/m1"));
  CHECK(c.i64() == 0);
  CHECK(store.keys_for_tests() == 4);
  CHECK(lines.all().empty());
}

TEST_CASE("workers store: 1.13 and 2.x clients share one table", "[workers_store]") {
  Lines lines;
  WorkersStore store(options(lines));
  Client old(store.port());  // 1.13: no VALIDATE, SET 0, GET 2, ADD 3, WAIT 5
  old.send(Bytes().u8(3).str("init/").i64(1));
  CHECK(old.i64() == 1);
  Client now(store.port());
  now.validate();
  now.send(Bytes().u8(ADD).str("init/").i64(1));
  CHECK(now.i64() == 2);
  old.send(Bytes().u8(0).str("/k").str("from 1.13"));
  now.send(Bytes().u8(WAIT).u64(1).str("/k"));
  CHECK(now.u8() == kStopWaiting);
  now.send(Bytes().u8(GET).str("/k"));
  CHECK(now.bytes() == "from 1.13");
  now.send(Bytes().u8(SET).str("/j").str("from 2.x"));
  old.send(Bytes().u8(5).u64(1).str("/j"));
  CHECK(old.u8() == kStopWaiting);
  old.send(Bytes().u8(2).str("/j"));
  CHECK(old.bytes() == "from 2.x");
}

TEST_CASE("workers store: a wait is answered when its last key is set, or canceled", "[workers_store][tsan]") {
  Lines lines;
  WorkersStore store(options(lines));
  Client waiter(store.port()), setter(store.port());
  waiter.validate();
  setter.validate();
  waiter.send(Bytes().u8(WAIT).u64(2).str("/x").str("/y"));
  setter.send(Bytes().u8(SET).str("/x").str("1"));
  CHECK(waiter.silent(100));  // /y is still missing
  setter.send(Bytes().u8(SET).str("/y").str("2"));
  CHECK(waiter.u8() == kStopWaiting);
  // The client's timeout: CANCEL_WAIT, answered WAIT_CANCELED; a later set
  // of that key sends nothing more.
  waiter.send(Bytes().u8(WAIT).u64(1).str("/z"));
  waiter.send(Bytes().u8(CANCEL_WAIT));
  CHECK(waiter.u8() == kWaitCanceled);
  setter.send(Bytes().u8(SET).str("/z").str("3"));
  CHECK(waiter.silent(100));
  waiter.send(Bytes().u8(PING).u32(7));
  CHECK(waiter.u32() == 7);
}

TEST_CASE("workers store: bad clients are closed with a line, the others are served", "[workers_store][tsan]") {
  Lines lines;
  auto o = options(lines);
  o.request_timeout = std::chrono::milliseconds(200);
  o.limits.max_value = 1 << 10;
  o.max_connections = 8;
  o.max_buffered_bytes = 512;
  WorkersStore store(o);
  Client good(store.port());
  good.validate();

  SECTION("a length over the limit") {
    Client bad(store.port());
    bad.validate();
    bad.send(Bytes().u8(SET).str("/k").u64(1u << 20));
    CHECK(bad.closed());
    CHECK_THAT(lines.all(), Catch::Contains("a value of 1048576 bytes, over the limit of 1024"));
  }
  SECTION("unfinished requests over the store's buffer limit") {
    Client bad(store.port());
    bad.validate();
    bad.send(Bytes().u8(SET).str("/k").u64(1000).raw(std::string(900, 'x').data(), 900));
    CHECK(bad.closed());
    CHECK_THAT(lines.all(), Catch::Contains("the store's unfinished requests would hold more than 512 bytes"));
  }
  SECTION("an unknown op") {
    Client bad(store.port());
    bad.validate();
    bad.send(Bytes().u8(200));
    CHECK(bad.closed());
    CHECK_THAT(lines.all(), Catch::Contains("op 200"));
  }
  SECTION("half a request, then nothing") {
    Client bad(store.port());
    bad.validate();
    bad.send(Bytes().u8(SET).str("/k").u64(100).raw("abc", 3));
    CHECK(bad.closed());
    CHECK_THAT(lines.all(), Catch::Contains("a request begun but not finished within 200 ms"));
  }
  SECTION("a GET of a key never set, an ADD to a value that is no number") {
    Client bad(store.port());
    bad.validate();
    bad.send(Bytes().u8(GET).str("/nope"));
    CHECK(bad.closed());
    Client worse(store.port());
    worse.validate();
    worse.send(Bytes().u8(SET).str("/t").str("text"));
    worse.send(Bytes().u8(ADD).str("/t").i64(1));
    CHECK(worse.closed());
    CHECK_THAT(lines.all(), Catch::Contains("GET of key '/nope', which is not set"));
    CHECK_THAT(lines.all(), Catch::Contains("ADD to key '/t', whose value is not a number"));
  }
  SECTION("a key with terminal escapes is logged with them quoted, never raw") {
    Client bad(store.port());
    bad.validate();
    bad.send(Bytes().u8(GET).str("/\x1b]0;pwned\x07\x1b[2J"));
    CHECK(bad.closed());
    CHECK_THAT(lines.all(), Catch::Contains("GET of key '/\\x1b]0;pwned\\x07\\x1b[2J', which is not set"));
    CHECK(lines.all().find('\x1b') == std::string::npos);
  }
  SECTION("a client gone in the middle of a wait") {
    {
      Client gone(store.port());
      gone.validate();
      gone.send(Bytes().u8(WAIT).u64(1).str("/later"));
      CHECK(gone.silent(50));
    }
    good.send(Bytes().u8(SET).str("/later").str("v"));
  }
  SECTION("more connections than the limit") {
    std::vector<std::unique_ptr<Client>> many;
    for (int i = 0; i < 7; ++i) many.push_back(std::make_unique<Client>(store.port()));
    Client over(store.port());
    CHECK(over.closed());
    CHECK_THAT(lines.all(), Catch::Contains("8 are open, its limit"));
  }
  // Whatever the other did, this one is still served.
  good.send(Bytes().u8(ADD).str("/alive").i64(1));
  CHECK(good.i64() == 1);
}

TEST_CASE("workers store: a new attempt finds an empty table and none of the old clients", "[workers_store]") {
  Lines lines;
  WorkersStore store(options(lines));
  const int port = store.port();
  Client old(port);
  old.validate();
  old.send(Bytes().u8(SET).str("/default_pg/rank_0").str("old address"));
  old.send(Bytes().u8(WAIT).u64(1).str("/never"));
  CHECK(old.silent(50));
  CHECK(store.keys_for_tests() == 1);
  store.new_attempt();
  CHECK(old.closed());
  CHECK(store.keys_for_tests() == 0);
  CHECK(store.connections_for_tests() == 0);
  // The same port: the next attempt's workers connect where the last ones did.
  CHECK(store.port() == port);
  Client next(port);
  next.validate();
  next.send(Bytes().u8(CHECK_).u64(1).str("/default_pg/rank_0"));
  CHECK(next.u8() == kNotReady);
}

TEST_CASE("workers store: a port in use is a clear error", "[workers_store]") {
  Lines lines;
  WorkersStore first(options(lines));
  auto o = options(lines);
  o.port = first.port();
  CHECK_THROWS_WITH(WorkersStore(o), Catch::Contains("cannot host the workers' store on port " +
                                                     std::to_string(first.port())) &&
                                         Catch::Contains("pick a free --master_port"));
}
