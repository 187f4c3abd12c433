#include "ddp/common/error_file.h"
#include "ddp/launcher/elastic/elastic_run.h"
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/report/summary.h"
#include "ddp/launcher/base/signal_names.h"
#include "ddp/launcher/base/time_text.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string.h>
#include <unistd.h>

using namespace ddp::launcher;

using namespace std::string_literals;

namespace {
std::string temp_path(const std::string& name) { return "/tmp/ddp-report-" + std::to_string(::getpid()) + name; }
std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}
}  // namespace

TEST_CASE("error file round trip in torchelastic's format") {
  std::string p = temp_path("a.json");
  ddp::ErrorRecord r{"RuntimeError: boom \"quoted\"\nline2", "frame 1\nframe 2", 1700000000, std::nullopt};
  ddp::write_error_file(p, r);
  auto back = ddp::read_error_file(p);
  REQUIRE(back);
  CHECK(back->message == r.message);
  CHECK(back->callstack == r.callstack);
  CHECK(back->timestamp == 1700000000);
  std::remove(p.c_str());
}

TEST_CASE("error files: python's plain form, a string message, garbage, missing") {
  std::string p = temp_path("b.json");
  std::ofstream(p) << R"({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "tb", "timestamp": "12"}}})";
  auto py = ddp::read_error_file(p);
  REQUIRE(py);
  CHECK(py->message == "ValueError: x");
  CHECK(py->timestamp == 12);
  std::ofstream(p) << R"({"message": "plain string"})";
  CHECK(ddp::read_error_file(p)->message == "plain string");
  std::ofstream(p) << "{not json";
  CHECK_THAT(ddp::read_error_file(p)->message, Catch::Contains("is not valid JSON"));
  std::remove(p.c_str());
  CHECK_FALSE(ddp::read_error_file(p).has_value());
}

// Found by fuzzing (tests/fuzz/fuzz_error_file): Boost's JSON parser recurses
// once per '[' or '{', so a worker that left 100000 of them in its error file
// made the launcher die of a stack overflow (exit 139) while writing its
// failure report.
TEST_CASE("error files nested too deep are reported instead of parsed") {
  std::string p = temp_path("deep.json");
  std::ofstream(p) << std::string(1000000, '[');
  auto deep = ddp::read_error_file(p);
  REQUIRE(deep);
  CHECK_THAT(deep->message, Catch::Contains("nested deeper than"));
  CHECK_THAT(deep->message, Catch::Contains(p));
  std::ofstream(p) << R"({"message": {"message": "ValueError: [[{x}]]", "extraInfo": {"py_callstack": "[{", "timestamp": "3"}}})";
  CHECK(ddp::read_error_file(p)->message == "ValueError: [[{x}]]");  // brackets inside strings do not count
  std::remove(p.c_str());
}

TEST_CASE("signal names") {
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(SIGTERM) == "SIGTERM");
}

TEST_CASE("signal_name names every signal as glibc's sigabbrev_np did (its own table, for the wheel's glibc 2.28)") {
  for (int sig = 1; sig < SIGRTMIN; ++sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    INFO("signal " << sig);
    CHECK(signal_name(sig) == (abbrev ? "SIG"s + abbrev : "signal " + std::to_string(sig)));
  }
  CHECK(signal_name(SIGRTMIN) == "SIGRTMIN");
  CHECK(signal_name(SIGRTMIN + 1) == "signal " + std::to_string(SIGRTMIN + 1));
  CHECK(signal_name(SIGRTMAX) == "SIGRTMAX");
}

TEST_CASE("failure report names the root cause") {
  WorkerExit root;
  root.rank = 3;
  root.local_rank = 1;
  root.pid = 4242;
  root.signaled = true;
  root.code = SIGSEGV;
  root.error_file = "/x/error.json";
  WorkerExit other;
  other.rank = 2;
  other.local_rank = 0;
  other.pid = 4241;
  other.code = 143;
  other.after_teardown = true;
  AttemptResult a;
  a.attempt = 0;
  a.root_cause = root;
  a.exits = {root, other};
  std::string rep = format_failure_report({a}, "node1", 0);
  CHECK_THAT(rep, Catch::Contains("rank       : 3 (local_rank: 1)"));
  CHECK_THAT(rep, Catch::Contains("pid        : 4242"));
  CHECK_THAT(rep, Catch::Contains("host       : node1"));
  CHECK_THAT(rep, Catch::Contains("exitcode   : 139 (signal 11 (SIGSEGV))"));
  CHECK_THAT(rep, Catch::Contains("Signal 11 (SIGSEGV) received by PID 4242"));
  CHECK_THAT(rep, Catch::Contains("rank 2 (local_rank 0, pid 4241): exit code 143, after the launcher stopped"));
  CHECK(root.shell_code() == 139);

  root.signaled = false;
  root.code = 1;
  root.error = ddp::ErrorRecord{"ValueError: bad", "Traceback\n  line", 0, std::nullopt};
  AttemptResult b = a;
  b.attempt = 1;
  b.root_cause = root;
  std::string rep2 = format_failure_report({a, b}, "node1", 1);
  CHECK_THAT(rep2, Catch::Contains("Earlier attempt 0 root cause"));
  CHECK_THAT(rep2, Catch::Contains("message    : ValueError: bad"));
  CHECK_THAT(rep2, Catch::Contains("    Traceback\n      line"));
  CHECK_THAT(format_restart_line(a, 2), Catch::Contains("restart 1 of 2"));

  AttemptResult ok;
  CHECK(format_failure_report({ok}, "h", 0).empty());
}

TEST_CASE("the root cause is the earliest failure: error file time, else exit time") {
  using namespace std::chrono;
  const auto t0 = system_clock::now();
  WorkerExit reaped_first;  // failed later (a peer's connection reset) but reaped first
  reaped_first.rank = 1;
  reaped_first.code = 1;
  reaped_first.time = t0 + milliseconds(10);
  reaped_first.error_time = t0 + milliseconds(5);
  WorkerExit reaped_last;  // wrote its error file first
  reaped_last.rank = 0;
  reaped_last.code = 1;
  reaped_last.time = t0 + milliseconds(50);
  reaped_last.error_time = t0 + milliseconds(1);
  WorkerExit ok;
  ok.rank = 2;
  ok.time = t0;
  CHECK(earliest_failure({ok, reaped_first, reaped_last})->rank == 0);
  reaped_last.error_time.reset();  // no error file: its exit time counts
  CHECK(earliest_failure({ok, reaped_first, reaped_last})->rank == 1);
  CHECK_FALSE(earliest_failure({ok}).has_value());
}

TEST_CASE("a root cause the teardown stopped after it wrote its error file: the exit code is the failure that started it") {
  using namespace std::chrono;
  const auto t0 = system_clock::now();
  WorkerExit first;  // wrote its error file first, then got the launcher's SIGTERM while exiting
  first.rank = 0;
  first.pid = 100;
  first.signaled = true;
  first.code = SIGTERM;
  first.after_teardown = true;
  first.error = ddp::ErrorRecord{"DeliberateFailure: from rank 0", "", 0, std::nullopt};
  first.error_time = t0 + milliseconds(1);
  first.time = t0 + milliseconds(30);
  WorkerExit second;  // failed a moment later but exited first: it started the teardown
  second.rank = 1;
  second.pid = 101;
  second.code = 3;
  second.error = ddp::ErrorRecord{"DeliberateFailure: from rank 1", "", 0, std::nullopt};
  second.error_time = t0 + milliseconds(2);
  second.time = t0 + milliseconds(10);
  AttemptResult a;
  a.exits = {second, first};
  a.root_cause = earliest_failure(a.exits);
  REQUIRE(a.root_cause->rank == 0);
  CHECK(a.exit_code() == 3);
  CHECK_THAT(format_failure_report({a}, "h", 0),
             Catch::Contains("exitcode   : 143 (signal 15 (SIGTERM), stopped by the launcher after it wrote its error file)"));
  // Without an error file the earliest failure is judged by its exit, so a
  // worker the teardown stopped is never the root cause then.
  a.exits[1].error.reset();
  a.exits[1].error_time.reset();
  a.root_cause = earliest_failure(a.exits);
  CHECK(a.root_cause->rank == 1);
  CHECK(a.exit_code() == 3);
}

TEST_CASE("the report shows peak memory, a never-started worker and a signal during the teardown") {
  WorkerExit root;
  root.rank = 4;
  root.local_rank = 4;
  root.code = 1;
  root.spawn_error = "cannot start worker local_rank 4: fork failed";
  WorkerExit other;
  other.rank = 0;
  other.pid = 77;
  other.signaled = true;
  other.code = SIGTERM;
  other.max_rss_kb = 50 * 1024;
  other.error = ddp::ErrorRecord{"RuntimeError: peer closed", "", 0, std::nullopt};
  AttemptResult a;
  a.root_cause = root;
  a.exits = {root, other};
  a.spawn_failed = true;
  a.signal_during_teardown = SIGTERM;
  CHECK_FALSE(a.restartable());
  CHECK(a.exit_code() == 1);
  std::string rep = format_failure_report({a}, "h", 3);
  CHECK_THAT(rep, Catch::Contains("pid        : - (never started)"));
  CHECK_THAT(rep, Catch::Contains("rank 0 (local_rank 0, pid 77): signal 15 (SIGTERM), max_rss 50 MiB"));
  CHECK_THAT(rep, Catch::Contains("    message: RuntimeError: peer closed"));
  CHECK_THAT(rep, Catch::Contains("got SIGTERM while stopping the failed group"));
}

TEST_CASE("thousands of workers stopped by the launcher are counted, not listed") {
  AttemptResult a;
  WorkerExit root;
  root.pid = 1000;
  root.code = 2;
  a.root_cause = root;
  a.exits.push_back(root);
  for (int r = 1; r <= 3000; ++r) {
    WorkerExit w;
    w.rank = w.local_rank = r;
    w.pid = 1000 + r;
    w.signaled = true;
    w.code = SIGTERM;
    w.after_teardown = true;
    a.exits.push_back(w);
  }
  std::string rep = format_failure_report({a}, "h", 0);
  CHECK(std::count(rep.begin(), rep.end(), '\n') < 40);
  CHECK_THAT(rep, Catch::Contains("... and 2992 more workers stopped by the launcher"));
}

// Issue 15, defect 5: on a full disk rank 1's "rank 0 failed to save
// checkpoint (see rank 0's error)" landed first in 2 of 3 runs and was named
// the root cause. A failure marked as following another rank's never is,
// whichever error file is older.
TEST_CASE("a rank that failed because another did is never the root cause, in either order") {
  using namespace std::chrono;
  const auto t0 = system_clock::now();
  WorkerExit real;  // rank 0: the ENOSPC
  real.rank = 0;
  real.pid = 200;
  real.code = 1;
  real.error = ddp::ErrorRecord{"ddp::worker::CheckpointError: could not save checkpoint 'X/epoch_7.pt': writing "
                                "'X/.epoch_7.pt.tmp.200': No space left on device",
                                "", 0, std::nullopt};
  real.time = t0 + milliseconds(20);
  WorkerExit follower;  // rank 1: learned of it from the save's all-reduce
  follower.rank = 1;
  follower.pid = 201;
  follower.code = 1;
  follower.error = ddp::ErrorRecord{"ddp::worker::PeerFailure: rank 0 failed to save checkpoint 'X/epoch_7.pt' (see "
                                    "rank 0's error)",
                                    "", 0, std::nullopt, 0};
  follower.time = t0 + milliseconds(10);
  for (int follower_first = 0; follower_first < 2; ++follower_first) {
    INFO("follower's error file " << (follower_first ? "first" : "second"));
    real.error_time = t0 + milliseconds(follower_first ? 5 : 1);
    follower.error_time = t0 + milliseconds(follower_first ? 1 : 5);
    for (const auto& exits : {std::vector<WorkerExit>{follower, real}, std::vector<WorkerExit>{real, follower}}) {
      AttemptResult a;
      a.exits = exits;
      a.root_cause = earliest_failure(a.exits);
      REQUIRE(a.root_cause);
      CHECK(a.root_cause->rank == 0);
      const std::string report = format_failure_report({a}, "h", 0);
      CHECK_THAT(report, Catch::Contains("message    : ddp::worker::CheckpointError: could not save"));
      CHECK_THAT(report, Catch::Contains("(see rank 0's error) (it followed rank 0's failure)"));
    }
  }
  // Only followers failed (the rank they follow was killed before it could
  // write a file, or it lives on another node): the earliest of them.
  WorkerExit follower2 = follower;
  follower2.rank = 2;
  follower2.pid = 202;
  follower2.error_time = t0 + milliseconds(3);
  follower.error_time = t0 + milliseconds(4);
  CHECK(earliest_failure({follower, follower2})->rank == 2);
}

TEST_CASE("error files: follows_rank round trip, written as a string as torchelastic's extraInfo values are") {
  std::string p = temp_path("f.json");
  ddp::ErrorRecord r{"ddp::worker::PeerFailure: x", "", 5, std::nullopt, 3};
  ddp::write_error_file(p, r);
  CHECK_THAT(read_all(p), Catch::Contains("\"follows_rank\":\"3\""));
  auto back = ddp::read_error_file(p);
  REQUIRE(back);
  CHECK(back->follows_rank == 3);
  ddp::write_error_file(p, ddp::ErrorRecord{"plain", "", 5, std::nullopt});
  CHECK_THAT(read_all(p), !Catch::Contains("follows_rank"));
  CHECK_FALSE(ddp::read_error_file(p)->follows_rank.has_value());
  std::remove(p.c_str());
}

// Issue 23, defect 4: a worker's bytes (its error file's message, its
// traceback, the line quoted from its stderr) reached the report raw: a NUL,
// BEL, BS, 0xff or ESC[2J went to the user's terminal. They are shown as
// \xNN; tabs, newlines between a message's lines and UTF-8 text stay.
TEST_CASE("report: control bytes and invalid UTF-8 of a worker's message are shown as hex escapes") {
  WorkerExit root;
  root.rank = 1;
  root.local_rank = 1;
  root.pid = 4242;
  root.code = 1;
  root.error_file = "/x/error.json";
  root.error = ddp::ErrorRecord{"ValueError: \x1b[2Jbad\0nul \x07\x08\xff\ttab caf\xc3\xa9\nsecond line"s,
                                "frame \x1b[31mred\nframe 2\r", 0, std::nullopt};
  WorkerExit other;
  other.rank = 0;
  other.local_rank = 0;
  other.pid = 4241;
  other.code = 1;
  other.stderr_message = "RuntimeError: peer \x1b]0;title\x07 gone \xc2\x9b""2J";
  AttemptResult a;
  a.root_cause = root;
  a.exits = {root, other};
  const std::string r = format_failure_report({a}, "h", 0);
  INFO(r);
  CHECK_THAT(r, Catch::Contains("  message    : ValueError: \\x1b[2Jbad\\x00nul \\x07\\x08\\xff\ttab caf\xc3\xa9\n"
                                "second line\n"));
  CHECK_THAT(r, Catch::Contains("  traceback  :\n    frame \\x1b[31mred\n    frame 2\\x0d\n"));
  CHECK_THAT(r, Catch::Contains("    message: RuntimeError: peer \\x1b]0;title\\x07 gone \\xc2\\x9b2J\n"));
  CHECK(r.find('\x1b') == std::string::npos);
  CHECK(r.find('\0') == std::string::npos);
}

TEST_CASE("run summary: the hot spares of the attempt's round, in the table's notes and in --summary_json") {
  AttemptResult a;
  WorkerExit w;
  w.rank = 3;
  w.pid = 4243;
  a.exits.push_back(w);
  a.replaced.push_back({0, "spare7", "901", "node2", "555"});
  RunTotals t;
  t.host = "spare7";
  CHECK_THAT(format_run_summary({a}, t),
             Catch::Contains("  node n0: host spare7 (pid 901), a hot spare, replaced host node2 (pid 555)\n"));
  CHECK_THAT(format_summary_json({a}, t),
             Catch::Contains("\"replaced\": [{\"node_rank\": 0, \"host\": \"spare7\", \"pid\": \"901\", "
                             "\"replaced_host\": \"node2\", \"replaced_pid\": \"555\"}]"));
  // The round line's text, as the helper sends it; what is not one of
  // ours is left out rather than shown wrong.
  const auto r = parse_replacements("0:spare7:901:node2:555,x:y,12:a:1:b:2");
  REQUIRE(r.size() == 2);
  CHECK(r[1].node_rank == 12);
  CHECK(r[1].replaced_host == "b");
  // Host names come from other nodes through the store: quoted, never raw
  // escapes on the terminal.
  const auto q = parse_replacements("3:ev\x1b[2Jil:1:n\x07:2");
  REQUIRE(q.size() == 1);
  CHECK(q[0].host == "ev\\x1b[2Jil");
  CHECK(q[0].replaced_host == "n\\x07");
}
