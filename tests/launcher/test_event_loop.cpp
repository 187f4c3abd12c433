// process/event_loop.h: passive sources, their slices of readiness, their
// deadlines, and the order in which one wake serves them.
#include "ddp/launcher/process/event_loop.h"

#include <catch2/catch.hpp>

#include <string>
#include <unistd.h>
#include <vector>

using namespace ddp::launcher;
using namespace std::chrono_literals;

namespace {

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    ::close(r);
    ::close(w);
  }
  void put(const char* s) { REQUIRE(::write(w, s, 1) == 1); }
  void take() {
    char c;
    REQUIRE(::read(r, &c, 1) == 1);
  }
};

// Watches its fds; records what it was told, into a log shared by all.
struct Recorder : EventLoop::Source {
  std::string name;
  std::vector<int> watch;
  std::optional<EventLoop::Clock::time_point> at;
  std::vector<std::string>* log = nullptr;
  std::vector<short> last;  // revents of its last slice
  Recorder(std::string n, std::vector<std::string>& l) : name(std::move(n)), log(&l) {}
  void fds(std::vector<int>& out) override { out.insert(out.end(), watch.begin(), watch.end()); }
  std::optional<EventLoop::Clock::time_point> deadline() override { return at; }
  void ready(const pollfd* p, size_t n) override {
    last.clear();
    for (size_t i = 0; i < n; ++i) last.push_back(p[i].revents);
    log->push_back(name + " ready");
  }
  void due() override {
    log->push_back(name + " due");
    at.reset();
  }
};

}  // namespace

TEST_CASE("event loop: each source gets its own slice, in its fds' order, and only when one is ready") {
  std::vector<std::string> log;
  Pipe a, b, c;
  Recorder one("one", log), two("two", log);
  one.watch = {a.r};
  two.watch = {b.r, c.r};
  EventLoop loop;
  loop.add(one);
  loop.add(two);
  c.put("x");
  CHECK(loop.run_once());
  CHECK(log == std::vector<std::string>{"two ready"});
  CHECK(two.last == std::vector<short>{0, POLLIN});
  c.take();
  a.put("x");
  b.put("x");
  log.clear();
  CHECK(loop.run_once());
  CHECK(log == std::vector<std::string>{"one ready", "two ready"});  // the order they were added
  CHECK(one.last == std::vector<short>{POLLIN});
  CHECK(two.last == std::vector<short>{POLLIN, 0});
}

TEST_CASE("event loop: the nearest deadline bounds the wait, and only a source that is due is told") {
  std::vector<std::string> log;
  Recorder soon("soon", log), later("later", log);
  const auto t0 = EventLoop::Clock::now();  // before the deadlines: a pause after them shortens no wait below
  soon.at = t0 + 30ms;
  later.at = t0 + 10s;
  EventLoop loop;
  loop.add(later);
  loop.add(soon);
  CHECK(loop.run_once());
  CHECK(EventLoop::Clock::now() - t0 >= 30ms);
  CHECK(EventLoop::Clock::now() - t0 < 5s);
  CHECK(log == std::vector<std::string>{"soon due"});
}

TEST_CASE("event loop: a limit that comes first ends the wait with nothing served") {
  std::vector<std::string> log;
  Pipe a;
  Recorder idle("idle", log);
  idle.watch = {a.r};
  idle.at = EventLoop::Clock::now() + 10s;
  EventLoop loop;
  loop.add(idle);
  CHECK(!loop.run_once(EventLoop::Clock::now() + 20ms));
  CHECK(!loop.run_once(EventLoop::Clock::now()));  // a limit of now only looks
  CHECK(log.empty());
  a.put("x");
  CHECK(loop.run_once(EventLoop::Clock::now()));
  CHECK(log == std::vector<std::string>{"idle ready"});
}

TEST_CASE("event loop: a source removed by another's callback is not served in that wake") {
  std::vector<std::string> log;
  Pipe a;
  struct Remover : Recorder {
    EventLoop* loop = nullptr;
    EventLoop::Source* victim = nullptr;
    using Recorder::Recorder;
    void ready(const pollfd* p, size_t n) override {
      Recorder::ready(p, n);
      loop->remove(*victim);
    }
  };
  Remover first("first", log);
  Recorder second("second", log);
  first.watch = {a.r};
  second.watch = {a.r};
  EventLoop loop;
  first.loop = &loop;
  first.victim = &second;
  loop.add(first);
  loop.add(second);
  a.put("x");
  CHECK(loop.run_once());
  CHECK(log == std::vector<std::string>{"first ready"});
}

TEST_CASE("event loop: deadline_in_ms maps a negative count to none") {
  CHECK(!deadline_in_ms(-1));
  CHECK(deadline_in_ms(0));
  CHECK(*deadline_in_ms(1000) > EventLoop::Clock::now() + 900ms);
}
