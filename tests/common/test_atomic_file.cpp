// write_file_atomically: content and mode, replacement, and that a failed
// write leaves the old file and no temp file behind.
#include <catch2/catch.hpp>

#include <csignal>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>

#include "ddp/common/atomic_file.h"
#include "test_support.h"

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

// Lowers the file-size limit for the current scope, so writes past it fail
// with EFBIG (SIGXFSZ ignored) the way a full disk fails them.
struct FileSizeLimit {
  rlimit saved{};
  void (*old_handler)(int);
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved);
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = saved;
    r.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
  }
};

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
  CHECK_THAT(message, Catch::StartsWith("writing '" + ddp::atomic_temp_path(path) + "': "));
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
  CHECK(ddp::atomic_temp_path("/x/y/epoch_1.pt") == "/x/y/.epoch_1.pt.tmp." + std::to_string(::getpid()));
  CHECK(ddp::atomic_temp_path("m.jsonl") == "./.m.jsonl.tmp." + std::to_string(::getpid()));
  CHECK(ddp::atomic_temp_path("/e.json") == "/.e.json.tmp." + std::to_string(::getpid()));
}
