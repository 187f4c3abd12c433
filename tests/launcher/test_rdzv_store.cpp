// The rendezvous store (launcher/rdzv/store_*.h) in process: the requests'
// meaning, waits answered by another client's set or by their timeout, and
// what a node says when the endpoint is not a ddp-launch store of its
// protocol version (a TCPStore, a silent program, another version).
#include <catch2/catch.hpp>

#include "store_client.h"
#include "store_protocol.h"
#include "store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using ddp::rdzv::ForeignStore;
using ddp::rdzv::OtherVersionStore;
using ddp::rdzv::StoreClient;
using ddp::rdzv::StoreError;
using ddp::rdzv::StoreServer;
using Clock = std::chrono::steady_clock;

namespace {

StoreClient connect(int port, std::chrono::milliseconds io = 5s) {
  return StoreClient("127.0.0.1", port, 2s, io, "0.1.0-test");
}

// A socket connected to 127.0.0.1:port, for bytes that are not the protocol.
int raw_connection(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// A listening socket that accepts (the kernel does) and never answers.
struct SilentListener {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int port = 0;
  SilentListener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(fd, 8) == 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~SilentListener() { ::close(fd); }
};

}  // namespace

TEST_CASE("rendezvous store: set, get, try_get, add, check and compare_set as the rendezvous uses them") {
  StoreServer server(0, "0.1.0-test");
  StoreClient c = connect(server.port());
  CHECK_FALSE(c.check("k"));
  CHECK_FALSE(c.try_get("k"));
  c.set("k", std::string("a\0b", 3));  // values are bytes
  CHECK(c.check("k"));
  CHECK(c.get("k") == std::string("a\0b", 3));
  CHECK(c.try_get("k") == std::string("a\0b", 3));

  CHECK(c.add("n", 0) == 0);  // a missing counter is 0
  CHECK(c.add("n", 5) == 5);
  CHECK(c.add("n", -2) == 3);
  CHECK(c.get("n") == "3");
  CHECK_THROWS_WITH(c.add("k", 1), Catch::Contains("add to key 'k', whose value is not a number"));
  // A refusal names the value, and is not a store gone (issue 51 item 8):
  // the helper says "the store refused", not "stopped answering".
  c.set("x", "x");
  CHECK_THROWS_AS(c.add("x", 1), ddp::rdzv::StoreRefused);
  CHECK_THROWS_WITH(c.add("x", 1), Catch::Contains("whose value is not a number: 'x'"));

  // compare_set: absent + "" sets; equal sets; otherwise the value is kept.
  CHECK(c.compare_set("round", "", "0") == "0");
  CHECK(c.compare_set("round", "", "7") == "0");
  CHECK(c.compare_set("round", "0", "1") == "1");
  CHECK(c.compare_set("round", "0", "2") == "1");
  CHECK(c.compare_set("absent", "x", "y") == "");
  CHECK_FALSE(c.check("absent"));

  // multi_get and multi_set (version 2): one request each, absent keys kept apart.
  c.multi_set({{"m/0", "a"}, {"m/1", ""}, {"m/2", std::string("c\0", 2)}});
  const auto v = c.multi_get({"m/0", "m/1", "m/9", "m/2"});
  REQUIRE(v.size() == 4);
  CHECK(v[0] == "a");
  CHECK(v[1] == "");
  CHECK_FALSE(v[2]);
  CHECK(v[3] == std::string("c\0", 2));
  CHECK(c.multi_get({}).empty());
}

TEST_CASE("rendezvous store: a waiter is answered by a multi_set of its key") {
  StoreServer server(0, "0.1.0-test");
  StoreClient waiter = connect(server.port()), setter = connect(server.port());
  auto waited = std::async(std::launch::async, [&] { return waiter.wait("r/rank/7", 10s); });
  std::this_thread::sleep_for(50ms);
  setter.multi_set({{"r/rank/6", "x"}, {"r/rank/7", "y"}});
  CHECK(waited.get());
}

TEST_CASE("rendezvous store: get and wait are answered by another node's set, or by their timeout") {
  StoreServer server(0, "0.1.0-test");
  StoreClient waiter = connect(server.port()), setter = connect(server.port());
  auto got = std::async(std::launch::async, [&] { return waiter.get("master"); });
  std::this_thread::sleep_for(100ms);
  CHECK(got.wait_for(0s) == std::future_status::timeout);
  setter.set("master", "host 1234");
  CHECK(got.get() == "host 1234");

  auto waited = std::async(std::launch::async, [&] { return waiter.wait("done", 10s); });
  std::this_thread::sleep_for(50ms);
  setter.add("done", 1);  // an add sets the key too
  CHECK(waited.get());

  const auto start = Clock::now();
  CHECK_FALSE(waiter.wait("never", 200ms));
  CHECK(Clock::now() - start >= 200ms);
  CHECK(Clock::now() - start < 3s);
  // The connection is still good after a wait that timed out.
  CHECK(waiter.get("master") == "host 1234");

  StoreClient quick = connect(server.port(), 300ms);
  CHECK_THROWS_WITH(quick.get("never"), Catch::Contains("key never was not set within 1 s"));
}

TEST_CASE("rendezvous store: waits that end by their timeout or their connection's close leave nothing listed") {
  // A node waits for a slow round in 1 s slices: thousands of nodes for
  // minutes must not pile up entries for a key nobody sets.
  StoreServer server(0, "0.1.0-test");
  StoreClient c = connect(server.port());
  for (int i = 0; i < 20; ++i) CHECK_FALSE(c.wait("never", 1ms));
  CHECK(server.waits_listed_for_tests() == 0);
  {
    // A node that dies in its wait: hello, then a 300 ms wait, then gone
    // (the server reads nothing during a wait, so its timeout ends it).
    const int fd = raw_connection(server.port());
    namespace wire = ddp::rdzv::wire;
    const std::string hello = wire::Writer()
                                  .u8(static_cast<std::uint8_t>(wire::Op::Hello))
                                  .str(wire::kMagic)
                                  .u32(wire::kVersion)
                                  .str("0.1.0-test")
                                  .frame();
    const std::string wait =
        wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::Wait)).str("never").i64(300).frame();
    REQUIRE(::write(fd, hello.data(), hello.size()) == static_cast<ssize_t>(hello.size()));
    REQUIRE(::write(fd, wait.data(), wait.size()) == static_cast<ssize_t>(wait.size()));
    for (int i = 0; i < 50 && server.waits_listed_for_tests() != 1; ++i) std::this_thread::sleep_for(10ms);
    CHECK(server.waits_listed_for_tests() == 1);
    ::close(fd);
  }
  for (int i = 0; i < 200 && server.waits_listed_for_tests() != 0; ++i) std::this_thread::sleep_for(10ms);
  CHECK(server.waits_listed_for_tests() == 0);
  // A wait answered by a set still works, and is off the list too.
  StoreClient setter = connect(server.port());
  auto got = std::async(std::launch::async, [&] { return c.get("k"); });
  std::this_thread::sleep_for(50ms);
  setter.set("k", "v");
  CHECK(got.get() == "v");
  CHECK(server.waits_listed_for_tests() == 0);
}

TEST_CASE("rendezvous store: a store that goes away is an error for a waiting node, at once, not at its timeout") {
  auto server = std::make_unique<StoreServer>(0, "0.1.0-test");
  StoreClient c = connect(server->port(), 30s);
  auto waiting = std::async(std::launch::async, [&] { return c.wait("never", 30s); });
  std::this_thread::sleep_for(100ms);
  const auto start = Clock::now();
  server.reset();
  try {
    waiting.get();
    FAIL("the wait did not fail");
  } catch (const ddp::rdzv::StoreLost& e) {
    // The time it took to notice, not the request's 30 s + 30 s budget; the
    // endpoint once in what(), not in detail (the helper's line names it).
    CHECK_THAT(e.detail, Catch::Contains("the store closed the connection (after 0.") ||
                             Catch::Contains("Connection reset by peer (after 0."));
    CHECK_THAT(e.detail, !Catch::Contains("127.0.0.1"));
    CHECK_THAT(e.what(), !Catch::Contains("(60 s)"));
  }
  CHECK(Clock::now() - start < 5s);
  CHECK_THROWS_WITH(c.check("k"), Catch::Contains("closed by an earlier error"));
}

TEST_CASE("rendezvous store: writes beyond the caps on a key, a value or the whole table are refused, naming "
          "the cap, and change nothing (issue 51 item 11)") {
  ddp::rdzv::Caps caps;
  caps.max_key = 16;
  caps.max_value = 100;
  caps.max_total = 1000;
  StoreServer server(0, "0.1.0-test", caps);
  StoreClient c = connect(server.port());
  c.set("k", std::string(100, 'a'));
  CHECK_THROWS_AS(c.set("k", std::string(101, 'a')), ddp::rdzv::StoreRefused);
  CHECK_THROWS_WITH(c.set("k", std::string(101, 'a')),
                    Catch::Contains("a value of 101 bytes for key 'k', over the store's cap of 100 bytes a value"));
  CHECK(c.get("k") == std::string(100, 'a'));
  CHECK_THROWS_WITH(c.set(std::string(17, 'k'), "v"), Catch::Contains("over the store's cap of 16 bytes a key"));
  CHECK_THROWS_WITH(c.compare_set("c", "", std::string(101, 'a')), Catch::Contains("cap of 100 bytes a value"));
  CHECK_FALSE(c.check("c"));
  // The total: 101 bytes held; 9 keys of 1 + 99 bytes more would be 1001.
  for (int i = 0; i < 8; ++i) c.set(std::to_string(i), std::string(99, 'b'));
  CHECK_THROWS_WITH(c.set("8", std::string(99, 'b')),
                    Catch::Contains("setting key '8' would make the store hold 1001 bytes, over its cap of 1000 bytes"));
  CHECK_THROWS_AS(c.multi_set({{"x", "1"}, {"9", std::string(99, 'b')}}), ddp::rdzv::StoreRefused);
  CHECK_FALSE(c.check("x"));  // all or nothing
  c.set("y", std::string(90, 'd'));  // 992 bytes held
  CHECK_THROWS_AS(c.add("new-counter", 1), ddp::rdzv::StoreRefused);
  // Overwriting in place fits; so does freeing room by a shorter value.
  c.set("0", std::string(99, 'c'));
  c.set("0", "");
  c.set("8", std::string(98, 'b'));
  CHECK(c.add("n", 1) == 1);
}

TEST_CASE("rendezvous store: a connection that does not start with the hello is closed (a TCPStore client, a "
          "port scanner)") {
  StoreServer server(0, "0.1.0-test");
  const int fd = raw_connection(server.port());
  // What a torch 2.x TCPStore client sends first: VALIDATE and its magic number.
  const unsigned char validate[] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
  REQUIRE(::write(fd, validate, sizeof(validate)) == sizeof(validate));
  char buf[16];
  // Closed, nothing answered (reset: the store left the bytes unread).
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  CHECK((n == 0 || (n < 0 && errno == ECONNRESET)));
  ::close(fd);
  // The store still serves its own nodes.
  StoreClient c = connect(server.port());
  c.set("k", "v");
  CHECK(c.get("k") == "v");
}

TEST_CASE("rendezvous store: a torchrun node's TCPStore client is named by its address and torch, a port scanner "
          "is not (issue 51 item 10)") {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::string> named;
  StoreServer server(0, "0.1.0-test", {}, [&](const std::string& address, const char* torch) {
    std::lock_guard<std::mutex> l(m);
    named.push_back(address + " " + torch);
    cv.notify_all();
  });
  auto opening = [&](const std::string& bytes) {
    const int fd = raw_connection(server.port());
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
    char buf[16];
    const ssize_t n = ::read(fd, buf, sizeof(buf));  // closed, nothing answered
    CHECK((n == 0 || (n < 0 && errno == ECONNRESET)));
    ::close(fd);
  };
  // torch 2.x: VALIDATE and its magic, then PING and a nonce.
  opening(std::string("\x00\xce\xf7\x85\x3c\x0d\x01\x02\x03\x04", 10));
  // torch 1.13: its first request, ADD (op 3) of "init/" by 1, little-endian.
  std::string add("\x03", 1);
  add += std::string("\x05\0\0\0\0\0\0\0", 8) + "init/" + std::string("\x01\0\0\0\0\0\0\0", 8);
  opening(add);
  // A port scanner's HTTP request: closed, named by nobody.
  opening("GET / HTTP/1.1\r\n\r\n");
  std::unique_lock<std::mutex> l(m);
  cv.wait_for(l, 5s, [&] { return named.size() >= 2; });
  CHECK(named == std::vector<std::string>{"127.0.0.1 2.x", "127.0.0.1 1.x"});
}

TEST_CASE("rendezvous store: an endpoint that accepts connections but never answers is a foreign store within the "
          "connect timeout, named so") {
  SilentListener silent;
  const auto start = Clock::now();
  CHECK_THROWS_AS(StoreClient("127.0.0.1", silent.port, 500ms, 5s, "0.1.0"), ForeignStore);
  CHECK_THROWS_WITH(StoreClient("127.0.0.1", silent.port, 500ms, 5s, "0.1.0"),
                    Catch::Contains("does not answer as a ddp-launch rendezvous store"));
  CHECK(Clock::now() - start < 4s);
}

TEST_CASE("rendezvous store: a store of another protocol version is refused at the hello, naming both "
          "ddp-launch versions") {
  StoreServer server(0, "0.9.0");
  server.speak_version_for_tests(ddp::rdzv::wire::kVersion + 1);
  CHECK_THROWS_AS(connect(server.port()), OtherVersionStore);
  const auto v = std::to_string(ddp::rdzv::wire::kVersion);
  CHECK_THROWS_WITH(connect(server.port()),
                    Catch::Contains("the rendezvous store of ddp-launch 0.9.0, protocol version " +
                                    std::to_string(ddp::rdzv::wire::kVersion + 1) + "; this node runs ddp-launch "
                                    "0.1.0-test, protocol version " + v));
}

TEST_CASE("rendezvous store: a node of protocol version 1 (other rendezvous keys) is answered `version` with "
          "this store's, so it stops naming both ddp-launch versions") {
  StoreServer server(0, "0.2.0");
  const int fd = raw_connection(server.port());
  namespace wire = ddp::rdzv::wire;
  const std::string hello =
      wire::Writer().u8(static_cast<std::uint8_t>(wire::Op::Hello)).str(wire::kMagic).u32(1).str("0.1.0").frame();
  REQUIRE(::write(fd, hello.data(), hello.size()) == static_cast<ssize_t>(hello.size()));
  unsigned char header[4];
  REQUIRE(::read(fd, header, 4) == 4);
  std::string body(wire::frame_length(header), '\0');
  REQUIRE(::read(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size()));
  ::close(fd);
  wire::Reader in(body);
  CHECK(static_cast<wire::Status>(in.u8()) == wire::Status::Version);
  CHECK(in.str() == wire::kMagic);
  CHECK(in.u32() == wire::kVersion);
  CHECK(in.str() == "0.2.0");
}

TEST_CASE("rendezvous store: nothing at the endpoint is a store error, not a foreign store") {
  int port = 0;
  {
    SilentListener closed_after;  // a port that was free a moment ago
    port = closed_after.port;
  }
  try {
    connect(port);
    FAIL("connected to a closed port");
  } catch (const ForeignStore&) {
    FAIL("a closed port is not a foreign store");
  } catch (const StoreError& e) {
    CHECK_THAT(e.what(), Catch::Contains("cannot connect"));
  }
}

TEST_CASE("rendezvous store: frames parse back, and a short or overlong frame is a protocol error") {
  using namespace ddp::rdzv::wire;
  Writer w;
  w.u8(3).u32(70000).i64(-5).str("key");
  ddp::rdzv::wire::Reader r(w.body());
  CHECK(r.u8() == 3);
  CHECK(r.u32() == 70000);
  CHECK(r.i64() == -5);
  CHECK(r.str() == "key");
  CHECK_NOTHROW(r.end());
  const std::string cut = w.body().substr(0, 10);
  ddp::rdzv::wire::Reader short_one(cut);
  short_one.u8();
  short_one.u32();
  CHECK_THROWS_AS(short_one.i64(), ProtocolError);
  const std::string f = w.frame();
  CHECK(frame_length(reinterpret_cast<const unsigned char*>(f.data())) == w.body().size());
  const unsigned char huge[4] = {0x7f, 0xff, 0xff, 0xff};
  CHECK_THROWS_AS(frame_length(huge), ProtocolError);
}
