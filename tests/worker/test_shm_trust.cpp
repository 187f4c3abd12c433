// What the shared-memory negotiation (worker/src/shm_allreduce.cpp) trusts:
// the store is open to anyone who reaches its port, so a segment name read
// from it must not make a rank map a segment someone else controls. These
// cases play the other rank (or an intruder) through an in-process store and
// plant segments in /dev/shm: another owner, another mode, a foreign name,
// a name rank 0 did not make. See docs/security.md.
#include <catch2/catch.hpp>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <random>
#include <string>

#include "shm_allreduce.h"
#include "test_skip.h"
#include "store_bytes.h"

using ddp::worker::ShmAllreduce;

using ddp::test::store_bytes;

namespace {

// A segment in /dev/shm that this test made, removed at the end.
struct Planted {
  std::string name;
  explicit Planted(std::string n, size_t size, mode_t mode, uid_t owner = ::geteuid()) : name(std::move(n)) {
    ::shm_unlink(name.c_str());
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
    REQUIRE(::fchmod(fd, mode) == 0);
    if (owner != ::geteuid()) REQUIRE(::fchown(fd, owner, static_cast<gid_t>(-1)) == 0);
    ::close(fd);
  }
  ~Planted() { ::shm_unlink(name.c_str()); }
  bool exists() const { return ::access(("/dev/shm" + name).c_str(), F_OK) == 0; }
};

std::string segment_name(int pid) {
  return "/ddp-shm-" + std::to_string(pid) + "-" + std::to_string(std::random_device{}());
}

// Plays rank 0 of a 2-rank group in the store: it posted (pid `pid0`),
// decided "on" with segment `name`, and mapped it. Then runs rank 1's side.
std::string rank1_verdict(const std::string& name, int pid0) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->set("ddp_shm/rank/0", store_bytes("machine " + std::to_string(pid0) + " 1"));
  store->set("ddp_shm/decision", store_bytes("on " + name + " " + std::to_string(pid0) + " " + std::to_string(::getpid())));
  store->set("ddp_shm/ok/0", store_bytes("1"));
  std::string why;
  auto shm = ShmAllreduce::negotiate(*store, 1, 2, std::chrono::milliseconds(5000), /*enabled=*/true, &why);
  CHECK(shm == nullptr);
  return why;
}

}  // namespace

TEST_CASE("shm trust: a segment that others may write (mode 0666) is refused, naming it and its mode") {
  const int pid0 = ::getpid();
  Planted seg(segment_name(pid0), ShmAllreduce::segment_size(2), 0666);
  const std::string why = rank1_verdict(seg.name, pid0);
  CHECK_THAT(why, Catch::Contains("rank 1 refused the shared-memory segment " + seg.name) &&
                      Catch::Contains("mode 0666") && Catch::Contains("expected") && Catch::Contains("mode 0600"));
  CHECK(seg.exists());  // not ours: left alone
}

TEST_CASE("shm trust: a segment owned by another user is refused, naming the owner") {
  if (::geteuid() != 0) DDP_SKIP("planting a segment owned by another uid needs root (fchown)");
  const int pid0 = ::getpid();
  Planted seg(segment_name(pid0), ShmAllreduce::segment_size(2), 0600, 65534);
  const std::string why = rank1_verdict(seg.name, pid0);
  CHECK_THAT(why, Catch::Contains("rank 1 refused the shared-memory segment " + seg.name) &&
                      Catch::Contains("owned by uid 65534") &&
                      Catch::Contains("expected uid " + std::to_string(::geteuid())));
}

TEST_CASE("shm trust: a segment of the wrong size is refused") {
  const int pid0 = ::getpid();
  Planted seg(segment_name(pid0), 4096, 0600);
  const std::string why = rank1_verdict(seg.name, pid0);
  CHECK_THAT(why, Catch::Contains("rank 1 refused the shared-memory segment " + seg.name) &&
                      Catch::Contains("4096 bytes"));
}

TEST_CASE("shm trust: a name that is not rank 0's /ddp-shm-<pid>-<n> is refused before it is opened") {
  const int pid0 = ::getpid();
  // Ours in every other respect, but not named after rank 0's pid.
  Planted other(segment_name(pid0 + 1), ShmAllreduce::segment_size(2), 0600);
  CHECK_THAT(rank1_verdict(other.name, pid0),
             Catch::Contains("rank 1 refused the shared-memory segment " + other.name) &&
                 Catch::Contains("not /ddp-shm-" + std::to_string(pid0) + "-<n>"));
  Planted odd("/some-app-segment-" + std::to_string(pid0), ShmAllreduce::segment_size(2), 0600);
  CHECK_THAT(rank1_verdict(odd.name, pid0), Catch::Contains("rank 1 refused the shared-memory segment " + odd.name));
}

TEST_CASE("shm trust: a decision written into the store before rank 0's is refused by rank 0, and both ranks stay on Gloo") {
  // Threads of one process: rank 0's pid is this pid, so a planted segment
  // named like rank 0's passes every check a peer can make; only rank 0
  // knows it did not make it.
  const int pid = ::getpid();
  Planted seg(segment_name(pid), ShmAllreduce::segment_size(2), 0600);
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->set("ddp_shm/decision", store_bytes("on " + seg.name + " " + std::to_string(pid) + " " + std::to_string(pid)));
  std::string why0, why1;
  auto r0 = std::async(std::launch::async,
                       [&] { return ShmAllreduce::negotiate(*store, 0, 2, std::chrono::milliseconds(5000), /*enabled=*/true, &why0); });
  auto r1 = std::async(std::launch::async,
                       [&] { return ShmAllreduce::negotiate(*store, 1, 2, std::chrono::milliseconds(5000), /*enabled=*/true, &why1); });
  CHECK(r0.get() == nullptr);
  CHECK(r1.get() == nullptr);
  for (const std::string& why : {why0, why1})
    CHECK_THAT(why, Catch::Contains("rank 0 refused the shared-memory segment " + seg.name) &&
                        Catch::Contains("rank 0 did not make it"));
}

TEST_CASE("shm trust: the negotiation of two ranks of this process still maps rank 0's own segment") {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string why0, why1;
  auto r0 = std::async(std::launch::async,
                       [&] { return ShmAllreduce::negotiate(*store, 0, 2, std::chrono::milliseconds(5000), /*enabled=*/true, &why0); });
  auto r1 = std::async(std::launch::async,
                       [&] { return ShmAllreduce::negotiate(*store, 1, 2, std::chrono::milliseconds(5000), /*enabled=*/true, &why1); });
  auto a = r0.get();
  auto b = r1.get();
  INFO(why0 << " | " << why1);
  CHECK(a != nullptr);
  CHECK(b != nullptr);
}

TEST_CASE("shm trust: a shared-buffers segment that others may write is refused, and no buffer is made") {
  // Two ranks of this process negotiate the slots; then rank 1 alone asks
  // for DDP's buckets while the store says rank 0 made a segment that
  // someone planted (named like rank 0's, mode 0666) and mapped it.
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto r0 = std::async(std::launch::async,
                       [&] { return ShmAllreduce::negotiate(*store, 0, 2, std::chrono::milliseconds(5000), true, nullptr); });
  auto r1 = std::async(std::launch::async,
                       [&] { return ShmAllreduce::negotiate(*store, 1, 2, std::chrono::milliseconds(5000), true, nullptr); });
  auto rank0 = r0.get();
  auto rank1 = r1.get();
  REQUIRE(rank0 != nullptr);
  REQUIRE(rank1 != nullptr);
  Planted seg(segment_name(::getpid()), 2 * 4096, 0666);  // 2 ranks x one page: the size 1024 floats take
  store->set("ddp_shm/buffers/0/name", store_bytes(seg.name));
  store->set("ddp_shm/buffers/0/ok/0", store_bytes("1"));
  std::string why;
  auto buffers = rank1->shared_buffers(*store, {{1024, at::kFloat}}, &why);
  CHECK(buffers.empty());
  CHECK_THAT(why, Catch::Contains("rank 1 refused the shared-memory segment " + seg.name) &&
                      Catch::Contains("mode 0666"));
  CHECK(seg.exists());  // not ours: left alone
}
