// read_error_file on what a worker may leave at TORCHELASTIC_ERROR_FILE:
// a record, nothing, a FIFO, a directory, a symlink, a file too large to
// read. It never blocks, never reads more than kMaxErrorFileBytes, and
// always says what it found.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp/common/error_file.h"
#include "test_skip.h"
#include "test_support.h"

using ddp::test::TempDir;
using ddp::test::write_file;

namespace {

long max_rss_kb() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// Fails the test run (SIGALRM) instead of hanging it when a read blocks.
struct Deadline {
  explicit Deadline(unsigned s) { ::alarm(s); }
  ~Deadline() { ::alarm(0); }
};

}  // namespace

TEST_CASE("error file: a record round-trips, a missing file is nothing") {
  TempDir dir;
  ddp::ErrorRecord rec{"ValueError: loss is NaN", "trace", 1700000000, 3};
  ddp::write_error_file(dir.file("e.json"), rec);
  auto back = ddp::read_error_file(dir.file("e.json"));
  REQUIRE(back);
  CHECK(back->message == rec.message);
  CHECK(back->callstack == "trace");
  CHECK(back->timestamp == 1700000000);
  CHECK(back->error_code == 3);
  CHECK_FALSE(ddp::read_error_file(dir.file("missing.json")));
}

TEST_CASE("error file: a FIFO is refused at once, without blocking") {
  TempDir dir;
  const std::string path = dir.file("e.json");
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  Deadline d(10);
  auto rec = ddp::read_error_file(path);
  REQUIRE(rec);
  CHECK(rec->message == "(error file " + path + " is not a regular file (a FIFO); not read)");
}

TEST_CASE("error file: a directory or a device is refused, naming what it is") {
  TempDir dir;
  const std::string sub = dir.file("e.json");
  REQUIRE(::mkdir(sub.c_str(), 0700) == 0);
  auto rec = ddp::read_error_file(sub);
  REQUIRE(rec);
  CHECK(rec->message == "(error file " + sub + " is not a regular file (a directory); not read)");
  // A symlink to /dev/zero would otherwise be read forever.
  const std::string link = dir.file("zero.json");
  REQUIRE(::symlink("/dev/zero", link.c_str()) == 0);
  Deadline d(10);
  rec = ddp::read_error_file(link);
  REQUIRE(rec);
  CHECK(rec->message == "(error file " + link + " is not a regular file (a character device); not read)");
}

TEST_CASE("error file: a symlink to a regular file the worker wrote is read") {
  TempDir dir;
  write_file(dir.file("real.json"), R"({"message": "RuntimeError: via a link"})");
  REQUIRE(::symlink(dir.file("real.json").c_str(), dir.file("e.json").c_str()) == 0);
  auto rec = ddp::read_error_file(dir.file("e.json"));
  REQUIRE(rec);
  CHECK(rec->message == "RuntimeError: via a link");
}

TEST_CASE("error file: one at the size limit is read, one over it is named as too large and not read") {
  TempDir dir;
  const std::string head = R"({"message": "ValueError: )";
  const std::string tail = R"("})";
  const size_t fits = ddp::kMaxErrorFileBytes - head.size() - tail.size();
  write_file(dir.file("fits.json"), head + std::string(fits, 'x') + tail);
  auto rec = ddp::read_error_file(dir.file("fits.json"));
  REQUIRE(rec);
  CHECK(rec->message.size() == std::string("ValueError: ").size() + fits);

  // 30 MB of a valid record: reading it whole would raise the peak RSS by
  // at least that much.
  const std::string big = dir.file("big.json");
  const size_t size = 30u << 20;
  {
    std::string body = head + std::string(size - head.size() - tail.size(), 'y') + tail;
    write_file(big, body);
  }
  const long before = max_rss_kb();
  rec = ddp::read_error_file(big);
  const long grown_kb = max_rss_kb() - before;
  REQUIRE(rec);
  INFO(rec->message);
  CHECK(rec->message.rfind("(error file " + big + " is " + std::to_string(size) +
                               " bytes; the launcher reads at most 1 MiB of an error file: look at the file itself; it begins: "
                               "{\"message\": \"ValueError: yyy",
                           0) == 0);
  CHECK(rec->message.size() < 1024);
  CHECK(grown_kb < 8 * 1024);
}

TEST_CASE("error file: invalid JSON and a missing message say so") {
  TempDir dir;
  write_file(dir.file("bad.json"), "{not json");
  auto rec = ddp::read_error_file(dir.file("bad.json"));
  REQUIRE(rec);
  CHECK(rec->message.rfind("(error file " + dir.file("bad.json") + " is not valid JSON: ", 0) == 0);
  write_file(dir.file("nomsg.json"), R"({"other": 1})");
  rec = ddp::read_error_file(dir.file("nomsg.json"));
  REQUIRE(rec);
  CHECK(rec->message == "(error file " + dir.file("nomsg.json") + " has no \"message\" field)");
}

// Issue 23, defect 3: a message with bytes that are not UTF-8 (a path
// given as $'caf\xe9') made the error file invalid JSON (Boost writes bytes
// >= 0x80 as they are), Python's json.load refused it, and the launcher's
// report lost the message ("not valid JSON: invalid code sequence") and
// named the follower as the root cause.
TEST_CASE("error file: bytes that are not UTF-8 are written as hex escapes, so the file is valid JSON") {
  TempDir dir;
  const std::string path = dir.file("e.json");
  ddp::ErrorRecord rec{"DataError: --data_dir 'caf\xe9' does not exist; bad \xff\xfe, cut \xe2\x9c, fine caf\xc3\xa9 \xe2\x9c\x93",
                       "frame 'caf\xe9'", 1700000000, std::nullopt};
  ddp::write_error_file(path, rec);
  auto back = ddp::read_error_file(path);
  REQUIRE(back);
  CHECK(back->message ==
        "DataError: --data_dir 'caf\\xe9' does not exist; bad \\xff\\xfe, cut \\xe2\\x9c, fine caf\xc3\xa9 \xe2\x9c\x93");
  CHECK(back->callstack == "frame 'caf\\xe9'");
  CHECK(back->timestamp == 1700000000);
  if (::access("/usr/bin/python3", X_OK) != 0) DDP_SKIP("no /usr/bin/python3 to json.load the file");
  auto py = ddp::test::run({"/usr/bin/python3", "-c",
                            "import json, sys\n"
                            "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
                            "print(ascii(d['message']['message']))\n",
                            path});
  INFO(py.output);
  CHECK(py.exit_code == 0);
  CHECK_THAT(py.output, Catch::Contains(R"("DataError: --data_dir 'caf\\xe9' does not exist; bad \\xff\\xfe, cut \\xe2\\x9c, fine caf\xe9 \u2713")"));
}

TEST_CASE("error file: invalid UTF-8 inside a string of another writer's file does not make it unreadable") {
  TempDir dir;
  // Raw bytes in the strings, as a writer that does not check them leaves them.
  write_file(dir.file("raw.json"), "{\"message\": {\"message\": \"ValueError: caf\xe9 \xc3\xa9\", \"extraInfo\": "
                                   "{\"py_callstack\": \"tb \xff\", \"timestamp\": \"12\"}}}");
  auto raw = ddp::read_error_file(dir.file("raw.json"));
  REQUIRE(raw);
  CHECK(raw->message == "ValueError: caf\\xe9 \xc3\xa9");
  CHECK(raw->callstack == "tb \\xff");
  CHECK(raw->timestamp == 12);
  // Python's json.dump of a str holding undecodable bytes (os.fsdecode,
  // surrogateescape) writes lone surrogates: \udce9 is the byte 0xe9.
  write_file(dir.file("py.json"),
             R"({"message": {"message": "FileNotFoundError: 'caf\udce9' \ud800x \u00e9 \ud83d\ude00", "extraInfo": {"timestamp": "7"}}})");
  auto py = ddp::read_error_file(dir.file("py.json"));
  REQUIRE(py);
  CHECK(py->message == "FileNotFoundError: 'caf\\xe9' \xef\xbf\xbdx \xc3\xa9 \xf0\x9f\x98\x80");
  CHECK(py->timestamp == 7);
  // Outside a string such bytes are still not JSON, and say so.
  write_file(dir.file("bad.json"), "{\"message\": \xe9}");
  CHECK_THAT(ddp::read_error_file(dir.file("bad.json"))->message, Catch::Contains("is not valid JSON"));
}
