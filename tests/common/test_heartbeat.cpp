// The heartbeat page: what the worker writes the launcher reads through its
// own mapping, and what attach() refuses (missing, foreign, wrong size).
#include <catch2/catch.hpp>

#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <thread>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp/common/heartbeat.h"
#include "test_support.h"

using ddp::CollectiveKind;
using ddp::Heartbeat;

TEST_CASE("heartbeat: a worker's writes are seen through the launcher's mapping, across a fork") {
  ddp::test::TempDir dir;
  const std::string path = dir.file("hb");
  auto launcher = Heartbeat::create(path);
  CHECK(launcher->read().pid == 0);
  CHECK_FALSE(launcher->read().in_collective());
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      auto worker = Heartbeat::attach(path);
      worker->set_step(7);
      worker->collective_started(1, CollectiveKind::Allreduce, 4096);
      worker->collective_finished(1);
      worker->collective_started(2, CollectiveKind::Broadcast, 12);
      ::_exit(0);
    } catch (...) {
      ::_exit(1);
    }
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const auto s = launcher->read();
  CHECK(s.pid == static_cast<uint64_t>(child));
  CHECK(s.step == 7);
  CHECK(s.collective_started == 2);
  CHECK(s.collective_finished == 1);
  CHECK(s.in_collective());
  CHECK(s.kind == CollectiveKind::Broadcast);
  CHECK(s.bytes == 12);
  CHECK(std::string(ddp::collective_kind_name(s.kind)) == "broadcast");
}

TEST_CASE("heartbeat: attach refuses a missing file, a foreign file and a wrong size, naming the path") {
  ddp::test::TempDir dir;
  CHECK_THROWS_WITH(Heartbeat::attach(dir.file("missing")), Catch::Contains(dir.file("missing")));
  {
    std::ofstream(dir.file("small")) << "hello";
  }
  CHECK_THROWS_WITH(Heartbeat::attach(dir.file("small")), Catch::Contains("regular file made by ddp-launch"));
  {
    std::ofstream out(dir.file("foreign"), std::ios::binary);
    out << std::string(4096, 'x');
  }
  CHECK_THROWS_WITH(Heartbeat::attach(dir.file("foreign")), Catch::Contains("wrong magic"));
  CHECK_THROWS_WITH(Heartbeat::attach(dir.path()), Catch::Contains(dir.path()));
  // create() never reuses a file someone placed there.
  Heartbeat::create(dir.file("hb"));
  CHECK_THROWS_WITH(Heartbeat::create(dir.file("hb")), Catch::Contains("cannot create the heartbeat file"));
}

TEST_CASE("heartbeat: collective_finished_at_least never moves the record back, from any thread") {
  ddp::test::TempDir dir;
  auto launcher = Heartbeat::create(dir.file("hb"));
  auto worker = Heartbeat::attach(dir.file("hb"));
  worker->collective_started(3, CollectiveKind::Allreduce, 8);
  worker->collective_finished_at_least(3);  // a late wait on an earlier collective
  worker->collective_finished_at_least(1);
  CHECK(launcher->read().collective_finished == 3);
  // Finishers on several threads, each in its own order: the highest wins.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 20000; ++i) worker->collective_finished_at_least(t % 2 ? 20000 - i : i + 1);
    });
  for (auto& th : threads) th.join();
  CHECK(launcher->read().collective_finished == 20000);
}

TEST_CASE("heartbeat: a sealed page cannot be truncated by anyone, and a worker attaches to it by its fd") {
  // issue 23 item 5: a page in a file that another process truncated killed
  // the rank that mapped it with SIGBUS.
  auto launcher = Heartbeat::create_sealed();
  REQUIRE(launcher->fd() >= 0);
  CHECK(::ftruncate(launcher->fd(), 0) != 0);  // F_SEAL_SHRINK
  const std::string by_fd = "/proc/self/fd/" + std::to_string(launcher->fd());
  CHECK(::truncate(by_fd.c_str(), 0) != 0);
  // The worker's view: the launcher's fd, inherited at the same number.
  const int inherited = ::dup(launcher->fd());
  REQUIRE(inherited >= 0);
  const std::string path = Heartbeat::fd_path(inherited);
  CHECK(path == "/proc/self/fd/" + std::to_string(inherited));
  auto worker = Heartbeat::attach(path);
  CHECK(::fcntl(inherited, F_GETFD) == -1);  // attach closed it: the worker's children do not inherit it
  worker->collective_started(5, CollectiveKind::Barrier, 0);
  CHECK(launcher->read().collective_started == 5);
  CHECK(launcher->read().pid == static_cast<uint64_t>(::getpid()));
  launcher->close_fd();
  CHECK(launcher->fd() == -1);
  CHECK(launcher->read().collective_started == 5);  // the mapping outlives the fd
}

TEST_CASE("heartbeat: attach by fd refuses an fd that is not a sealed page") {
  ddp::test::TempDir dir;
  {
    std::ofstream out(dir.file("plain"), std::ios::binary);
    out << std::string(4096, '\0');
  }
  const int fd = ::open(dir.file("plain").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  CHECK_THROWS_WITH(Heartbeat::attach(Heartbeat::fd_path(fd)), Catch::Contains("not a sealed heartbeat page"));
  CHECK_THROWS_WITH(Heartbeat::attach("/proc/self/fd/987654"), Catch::Contains("/proc/self/fd/987654"));
}

TEST_CASE("heartbeat: the step ring gives each step's start and the wait before it, and counts marks it lost") {
  ddp::test::TempDir dir;
  auto launcher = Heartbeat::create(dir.file("hb"));
  auto worker = Heartbeat::attach(dir.file("hb"));
  const uint64_t before = ddp::monotonic_ns();
  worker->set_step(1);
  worker->add_wait_ns(5000);
  worker->set_step(2);
  worker->add_wait_ns(7000);
  worker->set_step(3);
  std::vector<ddp::StepMark> marks;
  uint64_t next = 0;
  CHECK(launcher->read_steps(next, marks) == 0);
  REQUIRE(marks.size() == 3);
  CHECK(next == 3);
  CHECK(marks[0].step == 1);
  CHECK(marks[2].step == 3);
  CHECK(marks[0].wait_ns == 0);
  CHECK(marks[1].wait_ns == 5000);
  CHECK(marks[2].wait_ns == 12000);
  CHECK(marks[0].start_ns >= before);
  CHECK(marks[1].start_ns >= marks[0].start_ns);
  CHECK(launcher->read().wait_ns == 12000);
  CHECK(launcher->read().steps_marked == 3);
  // Nothing new: nothing read.
  marks.clear();
  CHECK(launcher->read_steps(next, marks) == 0);
  CHECK(marks.empty());
  // A writer faster than the reader: the ring keeps the last kStepRing marks.
  for (uint64_t s = 4; s < 4 + Heartbeat::kStepRing + 10; ++s) worker->set_step(s);
  CHECK(launcher->read_steps(next, marks) == 10);
  REQUIRE(marks.size() == static_cast<size_t>(Heartbeat::kStepRing));
  CHECK(marks.front().step == 14);
  CHECK(marks.back().step == 4 + Heartbeat::kStepRing + 9);
}

TEST_CASE("heartbeat: the collective ring gives finished collectives in order and waits for an unfinished one") {
  ddp::test::TempDir dir;
  auto launcher = Heartbeat::create(dir.file("hb"));
  auto worker = Heartbeat::attach(dir.file("hb"));
  worker->collective_started(1, CollectiveKind::Allreduce, 100);
  worker->collective_started(2, CollectiveKind::Broadcast, 12);
  worker->collective_finished_at_least(2);  // out of order: #1 still runs
  std::vector<ddp::CollectiveMark> done;
  uint64_t next = 1;
  CHECK(launcher->read_collectives(next, done) == 0);
  CHECK(done.empty());
  CHECK(next == 1);
  worker->collective_finished_at_least(1);
  worker->collective_finished_at_least(1);  // a second finisher keeps the first's time
  CHECK(launcher->read_collectives(next, done) == 0);
  REQUIRE(done.size() == 2);
  CHECK(next == 3);
  CHECK(done[0].seq == 1);
  CHECK(done[0].kind == CollectiveKind::Allreduce);
  CHECK(done[0].bytes == 100);
  CHECK(done[1].kind == CollectiveKind::Broadcast);
  CHECK(done[1].bytes == 12);
  for (const auto& m : done) CHECK(m.end_ns >= m.start_ns);
  // More than the ring holds between two reads: the overwritten ones are counted, not guessed.
  const uint64_t last = 2 + Heartbeat::kCollectiveRing + 5;
  for (uint64_t seq = 3; seq <= last; ++seq) {
    worker->collective_started(seq, CollectiveKind::Allreduce, seq);
    worker->collective_finished(seq);
  }
  done.clear();
  CHECK(launcher->read_collectives(next, done) == 5);
  REQUIRE(done.size() == static_cast<size_t>(Heartbeat::kCollectiveRing));
  CHECK(done.front().seq == 8);
  CHECK(done.back().seq == last);
  CHECK(done.back().bytes == last);
}

TEST_CASE("heartbeat: the exiting mark reads back, and the first one stays") {
  ddp::test::TempDir dir;
  auto page = Heartbeat::create(dir.file("hb"));
  CHECK(page->read().exiting_ns == 0);
  const uint64_t before = ddp::monotonic_ns();
  page->mark_exiting();
  const uint64_t first = page->read().exiting_ns;
  CHECK(first >= before);
  CHECK(first <= ddp::monotonic_ns());
  page->mark_exiting();
  CHECK(page->read().exiting_ns == first);
}

TEST_CASE("heartbeat: the recovery fields sit at offsets 80 and 88 and read back through both mappings") {
  ddp::test::TempDir dir;
  auto launcher = Heartbeat::create(dir.file("hb"));
  auto worker = Heartbeat::attach(dir.file("hb"));
  CHECK_FALSE(launcher->read().recovery_capable);  // a Python rank never writes it
  CHECK(launcher->read().recovery_generation == 0);
  worker->set_recovery_capable(true);
  launcher->set_recovery_generation(3);
  CHECK(launcher->read().recovery_capable);
  CHECK(worker->recovery_generation() == 3);
  // The offsets python/ddp_launch/heartbeat.py names.
  std::ifstream in(dir.file("hb"), std::ios::binary);
  std::vector<char> page(4096);
  in.read(page.data(), 4096);
  uint64_t at80 = 0, at88 = 0;
  std::memcpy(&at80, page.data() + 80, 8);
  std::memcpy(&at88, page.data() + 88, 8);
  CHECK(at80 == 1);
  CHECK(at88 == 3);
}
