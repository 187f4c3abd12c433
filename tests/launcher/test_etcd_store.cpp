// EtcdStore (launcher/rdzv/etcd_store.h) in process against a real etcd
// started by the test (tests/support/etcd_cluster.h): the Store requests'
// answers, a wait answered by a watch, failover past a member that is down
// or slow, and one-line errors when none answers (in process, and from
// ddp-launch itself). Each case 1 to 2 s (etcd's start, or the deadline
// of a case where none answers); skipped (77) where etcd is not installed.
#include "etcd_cluster.h"
#include "etcd_store.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <atomic>
#include <functional>
#include <thread>
#include <unistd.h>

using namespace ddp::test;
using ddp::rdzv::EtcdStore;
using ddp::rdzv::StoreError;
using namespace std::chrono_literals;

namespace {

// A TCP port that accepts connections and never answers (a hung member).
struct Mute {
  int fd = -1;
  int port = 0;
  Mute() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd, 16);
    socklen_t len = sizeof(a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Mute() { ::close(fd); }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port); }
};

std::string down_endpoint() { return "127.0.0.1:" + std::to_string(free_port()); }

}  // namespace

TEST_CASE("etcd-v3 store: set, add, compare_set and wait answer as the c10d store does") {
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  EtcdCluster etcd(1);
  EtcdStore s(etcd.endpoints(), 5s, 5s);
  const std::string k = "/t/" + std::to_string(::getpid()) + "/";
  CHECK(!s.try_get(k + "a"));
  CHECK(!s.check(k + "a"));
  s.set(k + "a", std::string("x y\n\0z", 6));
  CHECK(s.get(k + "a") == std::string("x y\n\0z", 6));
  CHECK(s.check(k + "a"));
  CHECK(s.add(k + "n", 0) == 0);
  CHECK(s.add(k + "n", 1) == 1);
  CHECK(s.add(k + "n", 5) == 6);
  CHECK(s.add(k + "n", 0) == 6);
  CHECK_THROWS_WITH(s.add(k + "a", 1), Catch::Contains("not a number"));
  CHECK(s.compare_set(k + "c", "", "0") == "0");   // absent and "": set
  CHECK(s.compare_set(k + "c", "", "9") == "0");   // present: its value
  CHECK(s.compare_set(k + "c", "7", "9") == "0");  // another value: its value
  CHECK(s.compare_set(k + "c", "0", "1") == "1");
  CHECK(s.compare_set(k + "d", "x", "1") == "");   // absent, expected not "": still absent
  CHECK(!s.wait(k + "w", 200ms));
  // Adds from two stores at once: each one counted once.
  EtcdStore t(etcd.endpoints(), 5s, 5s);
  std::thread other([&] {
    for (int i = 0; i < 20; ++i) t.add(k + "m", 1);
  });
  for (int i = 0; i < 20; ++i) s.add(k + "m", 1);
  other.join();
  CHECK(s.add(k + "m", 0) == 40);
}

TEST_CASE("etcd-v3 store: multi_get and multi_set, one Txn per 128 keys") {
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  EtcdCluster etcd(1);
  EtcdStore s(etcd.endpoints(), 5s, 5s);
  const std::string k = "/m/" + std::to_string(::getpid()) + "/";
  std::vector<std::pair<std::string, std::string>> entries;
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) {  // three Txns
    entries.emplace_back(k + std::to_string(i), "v" + std::to_string(i));
    keys.push_back(k + std::to_string(i));
  }
  // A key twice in one Txn's share (etcd refuses that): its last value.
  entries.insert(entries.begin() + 10, {k + "7", "again"});
  s.multi_set(entries);
  keys.push_back(k + "absent");
  const auto got = s.multi_get(keys);
  REQUIRE(got.size() == 301);
  CHECK(got[0] == "v0");
  CHECK(got[7] == "again");
  CHECK(got[299] == "v299");
  CHECK(!got[300]);
}

TEST_CASE("etcd-v3 store: a wait is answered by etcd's watch when another node sets the key") {
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  EtcdCluster etcd(1);
  EtcdStore s(etcd.endpoints(), 5s, 5s), t(etcd.endpoints(), 5s, 5s);
  const std::string k = "/w/" + std::to_string(::getpid());
  std::thread setter([&] {
    std::this_thread::sleep_for(300ms);
    t.set(k, "v");
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK(s.wait(k, 10s));
  const auto took = std::chrono::steady_clock::now() - start;
  setter.join();
  CHECK(took >= 250ms);
  CHECK(took < 2s);
  CHECK(s.get(k) == "v");
}

TEST_CASE("etcd-v3 store: members that are down or hang are skipped for the next one") {
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  EtcdCluster etcd(1);
  Mute mute;
  // The first try at the mute member costs one try (min(io_timeout, 3 s)).
  EtcdStore s(down_endpoint() + "," + mute.endpoint() + "," + etcd.endpoints(), 5s, 1s);
  s.set("/f/a", "1");
  CHECK(s.get("/f/a") == "1");
}

TEST_CASE("etcd-v3 store: no member answers: one line naming each endpoint and why, within the deadline") {
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  Mute mute;
  const std::string down = down_endpoint();
  const auto start = std::chrono::steady_clock::now();
  try {
    EtcdStore s(down + "," + mute.endpoint(), 2s, 1s);
    FAIL("no error");
  } catch (const StoreError& e) {
    const std::string m = e.what();
    CHECK(m.find('\n') == std::string::npos);
    CHECK_THAT(m, Catch::Contains(down + ": Connection refused"));
    CHECK_THAT(m, Catch::Contains(mute.endpoint() + ": no answer within 1 s"));
  }
  CHECK(std::chrono::steady_clock::now() - start < 4s);
}

TEST_CASE("etcd-v3 store: a web server at the endpoint, not etcd: one line saying so, at once") {
  Mute web;  // answers every request with a 404 page, as a web server (or an etcd older than 3.4) does
  std::atomic<bool> stop{false};
  std::thread server([&] {
    while (!stop) {
      const int c = ::accept(web.fd, nullptr, nullptr);
      if (c < 0) return;
      char buf[4096];
      (void)!::read(c, buf, sizeof(buf));
      const std::string page = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found";
      (void)!::write(c, page.data(), page.size());
      ::close(c);
    }
  });
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(EtcdStore(web.endpoint(), 5s, 5s),
                    Catch::Contains("the etcd endpoint " + web.endpoint() + ": it answers HTTP 404 to /v3/kv/range "
                                    "without JSON ('not found'): not etcd 3.4 or later"));
  CHECK(std::chrono::steady_clock::now() - start < 2s);
  stop = true;
  ::shutdown(web.fd, SHUT_RDWR);
  server.join();
}

TEST_CASE("etcd-v3 rendezvous: every endpoint down or hung: ddp-launch ends within join_timeout, one line naming "
          "each") {
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  Mute mute;
  const std::string a = down_endpoint(), b = mute.endpoint();
  const auto start = std::chrono::steady_clock::now();
  const auto r = run({bin_path("ddp-launch"), "--nnodes=2", "--use_env", "--no_python", "--rdzv_backend=etcd-v3",
                      "--rdzv_endpoint=" + a + "," + b, "--rdzv_conf=join_timeout=2,read_timeout=1", "/bin/true"},
                     {{"OMP_NUM_THREADS", "1"}}, 30);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: error: rendezvous in etcd at " + a + "," + b +
                                      " (rdzv_id none): no etcd member answered"));
  CHECK_THAT(r.output, Catch::Contains(a + ": Connection refused; " + b + ": no answer within 1 s (waiting for the "
                                       "answer to /v3/kv/range)); check that the etcd members run"));
}

// Not in CI (hidden): the gateway's cost per request against one local
// member, for docs/architecture.md. Run: launcher_rdzv_tests "[etcd-bench]"
TEST_CASE("etcd-v3 store: requests per second through the JSON gateway", "[.][etcd-bench]") {
  if (auto why = EtcdCluster::unavailable_reason()) DDP_SKIP(*why);
  EtcdCluster etcd(1);
  EtcdStore s(etcd.endpoints(), 5s, 5s);
  const int n = 500;
  auto per = [&](const char* what, const std::function<void(int)>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f(i);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
    WARN(what << ": " << us << " us per request");
  };
  per("set", [&](int i) { s.set("/b/" + std::to_string(i), "v"); });
  per("try_get", [&](int i) { s.try_get("/b/" + std::to_string(i)); });
  per("add", [&](int) { s.add("/b/n", 1); });
  per("compare_set", [&](int i) { s.compare_set("/b/c" + std::to_string(i), "", "1"); });
}
