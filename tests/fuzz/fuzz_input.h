#pragma once
// Helpers shared by the libFuzzer targets in this directory: turning the
// fuzzer's bytes into the inputs of the parsers (strings split on NUL, an
// environment map) and into a regular file for the readers that take a path.
// Test-only; nothing here is linked into the programs.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace ddp::fuzz {

// The bytes split on NUL ("a\0b" -> {"a", "b"}; "" -> {}).
inline std::vector<std::string> split_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> out;
  if (size == 0) return out;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  out.push_back(cur);
  return out;
}

// One file per fuzzing process, rewritten for every input (a fresh name per
// input would leave files behind when the fuzzer stops on a crash). Removed
// at exit; under $TMPDIR.
class ScratchFile {
 public:
  explicit ScratchFile(const char* stem) {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + stem + "-" + std::to_string(::getpid());
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  const std::string& write(const uint8_t* data, size_t size) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::perror(path_.c_str());
      std::abort();  // the harness, not the code under test: stop loudly
    }
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) {
        std::perror(path_.c_str());
        std::abort();
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace ddp::fuzz
