// torchrun's file timer without processes: the request lines as torch's
// FileTimerClient writes them, the table's acquire/release/expiry rules of
// torch 2.11's FileTimerServer, the bounds, and the pipe itself (written to
// as the client does: open O_WRONLY|O_NONBLOCK, one line, close).
#include "ddp/launcher/watch/file_timer.h"
#include "ddp/launcher/watch/file_timer_server.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/config/worker_env.h"
#include "scratch_dir.h"
#include "test_skip.h"

#include <catch2/catch.hpp>

#include <climits>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::launcher;

namespace {

TimerRequest parsed(const std::string& line) {
  std::string why;
  auto r = parse_timer_request(line, why);
  INFO(line << " -> " << why);
  REQUIRE(r);
  return *r;
}

std::string refused(const std::string& line) {
  std::string why;
  auto r = parse_timer_request(line, why);
  INFO(line);
  CHECK_FALSE(r);
  return why;
}

TimerRequest acquire(pid_t pid, const std::string& scope, double expiration, int sig = SIGKILL) {
  return TimerRequest{pid, scope, expiration, sig};
}

// As FileTimerClient._send_request: a non-blocking open for writing, one line, close.
bool client_write(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const std::string text = line + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

}  // namespace

TEST_CASE("file timer: requests exactly as torch 1.13 and 2.11's FileTimerClient writes them") {
  // Copied from the pipe under both clients (json.dumps of to_json()).
  const TimerRequest a = parsed(
      R"({"version": 1, "pid": 5023, "scope_id": "load_batch", "expiration_time": 1796125150.5914958, "signal": 9})");
  CHECK(a.pid == 5023);
  CHECK(a.scope_id == "load_batch");
  CHECK(a.expiration_time == Approx(1796125150.5914958).epsilon(1e-15));
  CHECK(a.signal == SIGKILL);
  CHECK_FALSE(a.release());
  const TimerRequest r = parsed(R"({"version": 1, "pid": 5023, "scope_id": "load_batch", "expiration_time": -1, "signal": 0})");
  CHECK(r.release());
  // expires()'s default scope is "file#line"; json.dumps escapes non-ASCII.
  CHECK(parsed(R"({"version": 1, "pid": 7, "scope_id": "/w/tr\u00e4in.py#12", "expiration_time": 5, "signal": 15})")
            .scope_id == "/w/tr\xc3\xa4in.py#12");
  // As FileTimerServer: version and unknown keys are not looked at; a
  // negative or zero signal means "do not kill" (the client's doc).
  CHECK(parsed(R"({"pid": 7, "scope_id": "s", "expiration_time": 5, "signal": -3, "extra": "x"})").signal == 0);
  CHECK(parsed(R"({"version": 2, "pid": 7, "scope_id": "", "expiration_time": 0, "signal": 0})").scope_id.empty());
}

TEST_CASE("file timer: a bad line is refused on its own, saying why") {
  CHECK_THAT(refused("{not json"), Catch::Contains("not JSON") && Catch::Contains("'{not json'"));
  CHECK_THAT(refused("[1, 2]"), Catch::Contains("not a flat JSON object"));
  CHECK_THAT(refused(R"({"pid": {"x": 1}, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
             Catch::Contains("not a flat JSON object"));
  CHECK_THAT(refused(R"({"pid": 7, "scope_id": "s", "signal": 9})"), Catch::Contains("missing"));
  // pid 0 or -1 would make kill() signal the launcher's own group, or every process.
  CHECK_THAT(refused(R"({"pid": 0, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
             Catch::Contains("pid 0 is not a process id"));
  CHECK_THAT(refused(R"({"pid": -1, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
             Catch::Contains("pid -1 is not"));
  CHECK_THAT(refused(R"({"pid": 7.5, "scope_id": "s", "expiration_time": 5, "signal": 9})"), Catch::Contains("pid 7.5"));
  CHECK_THAT(refused(R"({"pid": 99999999999999999999, "scope_id": "s", "expiration_time": 5, "signal": 9})"),
             Catch::Contains("not a process id"));
  CHECK_THAT(refused(R"({"pid": 7, "scope_id": "s", "expiration_time": "soon", "signal": 9})"),
             Catch::Contains("expiration_time soon is not a number"));
  CHECK_THAT(refused(R"({"pid": 7, "scope_id": "s", "expiration_time": 1e999, "signal": 9})"),
             Catch::Contains("expiration_time"));
  CHECK_THAT(refused(R"({"pid": 7, "scope_id": "s", "expiration_time": 5, "signal": 999})"),
             Catch::Contains("signal 999 is not a signal number"));
  // Brackets inside strings do not count as nesting.
  CHECK(parsed(R"({"pid": 7, "scope_id": "[{a}]", "expiration_time": 5, "signal": 9})").scope_id == "[{a}]");
  // Deep nesting never reaches Boost's recursive parser.
  CHECK_THAT(refused(std::string(100000, '{')), Catch::Contains("not a flat JSON object"));
}

TEST_CASE("file timer: the pipe's bytes become bounded lines, however they are cut") {
  LineSplitter split(16);
  auto a = split.feed("{\"a\"", 4);
  CHECK(a.empty());
  auto b = split.feed(":1}\n{\"b\":2}\n{\"c", 16);
  REQUIRE(b.size() == 2);
  CHECK(b[0].text == "{\"a\":1}");
  CHECK(b[1].text == "{\"b\":2}");
  CHECK_FALSE(b[0].too_long);
  // Too long: reported once with its start, the rest of it dropped up to its
  // '\n', fed in pieces; the next line is whole again.
  const std::string rest(40, 'x');
  auto c = split.feed(rest.data(), rest.size());
  REQUIRE(c.size() == 1);
  CHECK(c[0].too_long);
  CHECK(c[0].text.rfind("{\"c", 0) == 0);
  CHECK(split.feed(rest.data(), rest.size()).empty());
  auto d = split.feed("xx\nok\n", 6);
  REQUIRE(d.size() == 1);
  CHECK(d[0].text == "ok");
  CHECK_FALSE(d[0].too_long);
  // Exactly max_line bytes is a line.
  const std::string full = std::string(16, 'y') + "\n";
  auto e = split.feed(full.data(), full.size());
  REQUIRE(e.size() == 1);
  CHECK_FALSE(e[0].too_long);
}

TEST_CASE("file timer: acquire, release and expiry as FileTimerServer keeps them") {
  TimerTable t(100);
  CHECK_FALSE(t.next_expiration());
  CHECK(t.apply(acquire(10, "load", 105.0), 100.0));
  CHECK(t.apply(acquire(10, "step", 103.0), 100.5));
  CHECK(t.apply(acquire(11, "load", 110.0), 101.0));
  REQUIRE(t.next_expiration());
  CHECK(*t.next_expiration() == 103.0);
  // An acquire of a held (pid, scope) replaces it.
  CHECK(t.apply(acquire(10, "step", 104.0), 101.0));
  CHECK(t.size() == 3);
  CHECK(*t.next_expiration() == 104.0);
  // A release removes it; a release of nothing is nothing.
  CHECK(t.apply(TimerRequest{10, "step", -1, 0}, 102.0));
  CHECK(t.apply(TimerRequest{99, "never", -1, 0}, 102.0));
  CHECK(t.size() == 2);
  CHECK(t.take_expired(104.9).empty());
  // Expiry at expiration_time <= now, and every scope of that pid goes with it.
  CHECK(t.apply(acquire(10, "later", 200.0), 103.0));
  auto e = t.take_expired(105.0);
  REQUIRE(e.size() == 1);
  CHECK(e[0].pid == 10);
  CHECK(e[0].scopes.size() == 2);
  REQUIRE(e[0].fired);
  CHECK(e[0].fired->scope_id == "load");
  CHECK(e[0].fired->acquired_at == 100.0);
  CHECK(e[0].fired->signal == SIGKILL);
  CHECK(t.size() == 1);  // pid 11's
  t.drop_pid(11);
  CHECK(t.size() == 0);
}

TEST_CASE("file timer: the signal is the earliest expired scope's that has one") {
  TimerTable t(100);
  t.apply(acquire(10, "a", 100.0, 0), 90.0);
  t.apply(acquire(10, "b", 101.0, SIGTERM), 90.0);
  t.apply(acquire(10, "c", 102.0, SIGKILL), 90.0);
  t.apply(acquire(10, "d", 500.0, SIGUSR1), 90.0);  // not expired: never the one fired
  t.apply(acquire(12, "quiet", 100.0, 0), 90.0);
  auto e = t.take_expired(103.0);
  REQUIRE(e.size() == 2);
  REQUIRE(e[0].fired);
  CHECK(e[0].fired->scope_id == "b");
  CHECK(e[0].fired->signal == SIGTERM);
  CHECK(e[0].scopes.size() == 4);
  // Only scopes without a signal expired: nothing is sent, the scopes still go.
  CHECK(e[1].pid == 12);
  CHECK_FALSE(e[1].fired);
  CHECK(t.size() == 0);
}

TEST_CASE("file timer: the table holds at most max_scopes, and a held scope can still be renewed") {
  TimerTable t(2);
  CHECK(t.apply(acquire(1, "a", 10), 0));
  CHECK(t.apply(acquire(1, "b", 10), 0));
  CHECK_FALSE(t.apply(acquire(1, "c", 10), 0));
  CHECK(t.size() == 2);
  CHECK(t.apply(acquire(1, "a", 20), 0));
  CHECK(t.apply(TimerRequest{1, "b", -1, 0}, 0));
  CHECK(t.apply(acquire(1, "c", 10), 0));
}

TEST_CASE("file timer: the expired scope's line in the report") {
  ExpiredScope e;
  e.scope_id = "load_batch";
  e.pid = 4242;
  e.signal = SIGKILL;
  e.acquired_for_s = 1.04;
  e.acquired_at = std::chrono::system_clock::from_time_t(1764589261);
  CHECK(format_expired_scope(e) ==
        "timer scope 'load_batch' expired (acquired for 1.0 s at 2025-12-01 11:41:01 UTC; sent SIGKILL)");
}

TEST_CASE("file timer: the pipe serves clients, keeps only acceptable pids, warns once, and is removed") {
  ddp::test::ScratchDir scratch;
  const std::string path = scratch.dir + "/" + kTimerPipeName;
  {
    FileTimerServer server(path);
    struct stat st;
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(server.ms_to_next_expiry(100.0) == -1);
    auto only_7 = [](pid_t p) { return p == 7; };
    CHECK(server.read(100.0, only_7).empty());  // nothing there: no block, no warning
    // Two clients, one after the other: the pipe never reads end-of-file between them.
    REQUIRE(client_write(path, R"({"version": 1, "pid": 7, "scope_id": "a", "expiration_time": 101.5, "signal": 9})"));
    REQUIRE(client_write(path, R"({"version": 1, "pid": 7, "scope_id": "b", "expiration_time": 103, "signal": 9})"));
    CHECK(server.read(100.0, only_7).empty());
    CHECK(server.table().size() == 2);
    CHECK(server.ms_to_next_expiry(100.0) == 1500);
    CHECK(server.ms_to_next_expiry(100.0004) == 1500);  // rounded up: no early wake-up that finds nothing due
    CHECK(server.ms_to_next_expiry(200.0) == 0);
    // A stranger's pid, garbage, a line too long: refused; one warning only.
    REQUIRE(client_write(path, R"({"version": 1, "pid": 1, "scope_id": "x", "expiration_time": 101, "signal": 9})"));
    REQUIRE(client_write(path, "garbage"));
    REQUIRE(client_write(path, std::string(PIPE_BUF + 10, 'z')));
    REQUIRE(client_write(path, R"({"version": 1, "pid": 7, "scope_id": "a", "expiration_time": -1, "signal": 0})"));
    const std::string w = server.read(100.0, only_7);
    CHECK_THAT(w, Catch::StartsWith("ddp-launch: warning: ignored a file-timer request on " + path + ": pid 1 (scope 'x')"));
    CHECK_THAT(w, Catch::Contains("further bad requests are ignored without a warning"));
    CHECK(server.table().size() == 1);  // "a" released after the refused lines
    REQUIRE(client_write(path, "garbage again"));
    CHECK(server.read(100.0, only_7).empty());
    CHECK(server.ms_to_next_expiry(100.0) == 3000);
  }
  struct stat st;
  CHECK(::lstat(path.c_str(), &st) != 0);  // removed
  // Without a server there is no reader: the client's open fails (ENXIO
  // while a pipe is there, ENOENT here), as with a torchrun that is gone.
  CHECK_FALSE(client_write(path, "{}"));
}

TEST_CASE("file timer: an old pipe at the path is replaced, anything else is an error naming it") {
  ddp::test::ScratchDir scratch;
  const std::string fifo = scratch.dir + "/old_pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  { FileTimerServer server(fifo); }
  const std::string file = scratch.dir + "/a_file";
  std::ofstream(file) << "keep me";
  CHECK_THROWS_WITH(FileTimerServer(file), Catch::Contains(file) && Catch::Contains("is not a named pipe"));
  std::ifstream in(file);
  std::string kept;
  std::getline(in, kept);
  CHECK(kept == "keep me");
  CHECK_THROWS_WITH(FileTimerServer(scratch.dir + "/no/such/dir/pipe"),
                    Catch::Contains("cannot create") && Catch::Contains("TORCHELASTIC_TIMER_FILE"));
}

// Issue 23, defect 2: a pipe another user made at TORCHELASTIC_TIMER_FILE
// is someone who can read the workers' requests (and so their pids and
// scopes) or write requests of their own. It is refused, naming its owner,
// and left where it is: neither used nor removed.
TEST_CASE("file timer: a named pipe another user made is refused, not used and not removed") {
  if (::geteuid() != 0) DDP_SKIP("needs root to make a pipe owned by another user (nobody)");
  ddp::test::ScratchDir scratch;
  const std::string fifo = scratch.dir + "/their_pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0666) == 0);
  REQUIRE(::chmod(fifo.c_str(), 0666) == 0);  // whatever the umask
  REQUIRE(::chown(fifo.c_str(), 65534, 65534) == 0);
  struct stat before;
  REQUIRE(::lstat(fifo.c_str(), &before) == 0);
  CHECK_THROWS_WITH(FileTimerServer(fifo), Catch::Contains(fifo) && Catch::Contains("owned by uid 65534") &&
                                               Catch::Contains("mode 0666") &&
                                               Catch::Contains("TORCHELASTIC_TIMER_FILE"));
  struct stat after;
  REQUIRE(::lstat(fifo.c_str(), &after) == 0);
  CHECK(S_ISFIFO(after.st_mode));
  CHECK(after.st_uid == 65534u);
  CHECK(after.st_ino == before.st_ino);
}

TEST_CASE("file timer: the pipe made is this user's, mode 0600, whatever the umask") {
  ddp::test::ScratchDir scratch;
  const mode_t old = ::umask(0);
  {
    FileTimerServer server(scratch.dir + "/pipe");
    struct stat st;
    REQUIRE(::lstat(server.path().c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK(st.st_uid == ::geteuid());
    CHECK((st.st_mode & 07777) == 0600);
  }
  ::umask(old);
}

TEST_CASE("file timer: on only with TORCHELASTIC_ENABLE_FILE_TIMER=1, at the user's TORCHELASTIC_TIMER_FILE if set") {
  auto opts = [](EnvMap env) { return parse_launch_options({"train.py"}, env); };
  CHECK_FALSE(opts({}).file_timer);
  CHECK_FALSE(opts({{"TORCHELASTIC_TIMER_FILE", "/x/pipe"}}).file_timer);  // passes to the workers as any variable
  CHECK_FALSE(opts({{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}).file_timer);
  CHECK(opts({{"TORCHELASTIC_ENABLE_FILE_TIMER", "0"}}).notes.empty());
  const LaunchOptions on = opts({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}});
  CHECK(on.file_timer);
  CHECK(on.file_timer_path.empty());  // the run directory's pipe
  CHECK(opts({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", "/x/pipe"}}).file_timer_path == "/x/pipe");
  CHECK_THROWS_WITH(opts({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}, {"TORCHELASTIC_TIMER_FILE", ""}}),
                    Catch::Contains("TORCHELASTIC_TIMER_FILE is empty"));
  // torchrun compares with "1" only: "true" serves nothing there either, but here it is said.
  const LaunchOptions truthy = opts({{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"}});
  CHECK_FALSE(truthy.file_timer);
  REQUIRE(truthy.notes.size() == 1);
  CHECK_THAT(truthy.notes[0], Catch::Contains("TORCHELASTIC_ENABLE_FILE_TIMER=true is not 1"));
}

TEST_CASE("file timer: the workers get the pipe's path as TORCHELASTIC_TIMER_FILE, only when it is served") {
  const LaunchOptions o = parse_launch_options({"train.py"}, {});
  GroupSpec g;
  g.opts = &o;
  g.nproc = 2;
  CHECK(worker_environment({}, g, 1, "e").count("TORCHELASTIC_TIMER_FILE") == 0);
  CHECK(worker_environment({{"TORCHELASTIC_TIMER_FILE", "/mine"}}, g, 1, "e").at("TORCHELASTIC_TIMER_FILE") == "/mine");
  g.timer_file = "/tmp/ddp-launch-x/watchdog_timer";
  CHECK(worker_environment({}, g, 1, "e").at("TORCHELASTIC_TIMER_FILE") == "/tmp/ddp-launch-x/watchdog_timer");
}

TEST_CASE("file timer: an expired scope is the root cause and the attempt's exit code is 124") {
  ExpiredScope x;
  x.scope_id = "load_batch";
  x.pid = 4242;
  x.signal = SIGKILL;
  x.acquired_for_s = 1.0;
  x.acquired_at = std::chrono::system_clock::from_time_t(1764589261);
  x.expired_at = x.acquired_at + std::chrono::seconds(1);
  WorkerExit expired;
  expired.rank = 1;
  expired.local_rank = 1;
  expired.pid = 4242;
  expired.signaled = true;
  expired.code = SIGKILL;
  expired.time = x.expired_at + std::chrono::milliseconds(50);  // reaped after the other
  expired.expired_scope = x;
  WorkerExit stopped;
  stopped.rank = 0;
  stopped.pid = 4241;
  stopped.signaled = true;
  stopped.code = SIGTERM;
  stopped.after_teardown = true;
  stopped.time = x.expired_at + std::chrono::milliseconds(10);
  AttemptResult a;
  a.exits = {stopped, expired};
  a.root_cause = earliest_failure(a.exits);
  REQUIRE(a.root_cause);
  CHECK(a.root_cause->pid == 4242);
  CHECK(a.exit_code() == 124);
  CHECK(a.restartable());
  CHECK_THAT(format_restart_line(a, 1), Catch::Contains("failed: rank 1 timer scope 'load_batch' expired; restarting"));
  const std::string report = format_failure_report({a}, "h", 0);
  CHECK_THAT(report, Catch::Contains("exitcode   : 124 (timer scope 'load_batch' expired; the worker ended with signal 9 (SIGKILL))"));
  CHECK_THAT(report, Catch::Contains("message    : rank 1 (local_rank 1, pid 4242): timer scope 'load_batch' expired "
                                     "(acquired for 1.0 s at 2025-12-01 11:41:01 UTC; sent SIGKILL)"));
  // A worker that survived its signal (it caught it) and exited 0 still failed.
  expired.signaled = false;
  expired.code = 0;
  CHECK(expired.failed());
}
