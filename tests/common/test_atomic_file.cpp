// write_file_atomically: content and mode, replacement, that a failed
// write leaves the old file and no temp file behind, and that a file planted
// where a predictable temp name would be (a symlink, a FIFO) is never used.
#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <future>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddp/common/atomic_file.h"
#include "file_size_limit.h"
#include "test_support.h"

using ddp::test::FileSizeLimit;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (auto* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

// The temp name earlier versions used, "<dir>/.<name>.tmp.<pid>": anyone
// who could write in the directory could plant a file there in advance.
std::string predictable_temp_name(const std::string& dir, const std::string& name) {
  return dir + "/." + name + ".tmp." + std::to_string(::getpid());
}

}  // namespace

TEST_CASE("write_file_atomically writes the content with the mode and leaves no temp file", "[atomic_file]") {
  ddp::test::TempDir dir;
  const std::string path = dir.file("a.json");
  ddp::write_file_atomically(path, "hello\n", 0600);
  CHECK(slurp(path) == "hello\n");
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"a.json"});
}

TEST_CASE("write_file_atomically replaces an existing file, binary data included", "[atomic_file]") {
  ddp::test::TempDir dir;
  const std::string path = dir.file("b.pt");
  ddp::write_file_atomically(path, std::string(100000, 'x'));
  const std::string binary("\0\x01\xff z", 5);
  ddp::write_file_atomically(path, binary);
  CHECK(slurp(path) == binary);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"b.pt"});
}

TEST_CASE("a failed write keeps the old file and removes the temp file", "[atomic_file]") {
  ddp::test::TempDir dir;
  const std::string path = dir.file("c.pt");
  ddp::write_file_atomically(path, "old");
  std::string message;
  {
    FileSizeLimit limit(4096);
    try {
      ddp::write_file_atomically(path, std::string(1 << 20, 'n'));
    } catch (const ddp::AtomicWriteError& e) {
      message = e.what();
    }
  }
  CHECK_THAT(message, Catch::StartsWith("writing '" + ddp::atomic_temp_prefix(path)));
  CHECK_THAT(message, Catch::Contains("too large"));  // EFBIG: "File too large"
  CHECK(slurp(path) == "old");
  CHECK(names_in(dir.path()) == std::vector<std::string>{"c.pt"});
}

TEST_CASE("a missing directory is an error naming the temp file", "[atomic_file]") {
  ddp::test::TempDir dir;
  const std::string path = dir.file("no/such/d.pt");
  CHECK_THROWS_WITH(ddp::write_file_atomically(path, "x"),
                    Catch::StartsWith("creating temp file '" + dir.path() + "/no/such/.d.pt.tmp.") &&
                        Catch::Contains("No such file or directory"));
}

TEST_CASE("the temp file is hidden and in the target's directory", "[atomic_file]") {
  const std::string pid = std::to_string(::getpid());
  CHECK(ddp::atomic_temp_prefix("/x/y/epoch_1.pt") == "/x/y/.epoch_1.pt.tmp." + pid + ".");
  CHECK(ddp::atomic_temp_prefix("m.jsonl") == "./.m.jsonl.tmp." + pid + ".");
  CHECK(ddp::atomic_temp_prefix("/e.json") == "/.e.json.tmp." + pid + ".");
}

// The temp file of a failed write, as its message names it.
static std::string temp_name_of_failed_write(const std::string& path) {
  FileSizeLimit limit(16);
  try {
    ddp::write_file_atomically(path, std::string(4096, 'n'));
  } catch (const ddp::AtomicWriteError& e) {
    const std::string m = e.what();  // "writing '<temp>': File too large"
    const auto q = m.find('\'', 9);
    if (m.rfind("writing '", 0) == 0 && q != std::string::npos) return m.substr(9, q - 9);
  }
  return "";
}

TEST_CASE("each write draws a fresh temp name: the prefix and 16 random hex digits", "[atomic_file]") {
  ddp::test::TempDir dir;
  const std::string path = dir.file("s.json");
  const std::string prefix = ddp::atomic_temp_prefix(path);
  const std::string a = temp_name_of_failed_write(path), b = temp_name_of_failed_write(path);
  INFO(a << " " << b);
  for (const std::string& name : {a, b}) {
    REQUIRE(name.size() == prefix.size() + 16);
    CHECK(name.compare(0, prefix.size(), prefix) == 0);
    CHECK(name.find_first_not_of("0123456789abcdef", prefix.size()) == std::string::npos);
  }
  CHECK(a != b);
  CHECK(names_in(dir.path()).empty());
}

// Issue 23, defect 1: the temp file was opened O_CREAT|O_TRUNC at a name
// anyone could predict, so a symlink planted there was followed (its target
// overwritten, as root any file) and a FIFO planted there blocked the open.
TEST_CASE("a symlink planted at a predictable temp name is not followed", "[atomic_file]") {
  ddp::test::TempDir dir;
  const std::string victim = dir.file("victim");
  {
    std::ofstream(victim) << "keep me";
  }
  const std::string planted = predictable_temp_name(dir.path(), "s.json");
  REQUIRE(::symlink(victim.c_str(), planted.c_str()) == 0);
  ddp::write_file_atomically(dir.file("s.json"), "{}\n", 0600);
  CHECK(slurp(victim) == "keep me");
  CHECK(slurp(dir.file("s.json")) == "{}\n");
  struct stat st;
  REQUIRE(::lstat(planted.c_str(), &st) == 0);  // someone else's file: left alone
  CHECK(S_ISLNK(st.st_mode));
}

TEST_CASE("a FIFO planted at a predictable temp name does not block the write", "[atomic_file]") {
  ddp::test::TempDir dir;
  const std::string planted = predictable_temp_name(dir.path(), "s.json");
  REQUIRE(::mkfifo(planted.c_str(), 0666) == 0);
  auto write = std::async(std::launch::async, [&] { ddp::write_file_atomically(dir.file("s.json"), "{}\n"); });
  const bool finished = write.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!finished) {
    // Blocked in open(O_WRONLY) on the FIFO: a reader lets it go on, so the
    // test ends (failed) instead of hanging.
    const int rd = ::open(planted.c_str(), O_RDONLY | O_NONBLOCK);
    write.wait();
    if (rd >= 0) ::close(rd);
  }
  CHECK(finished);
  write.get();
  CHECK(slurp(dir.file("s.json")) == "{}\n");
  struct stat st;
  REQUIRE(::lstat(planted.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
}
