#include "ddp/launcher/process/run_dir.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <sys/random.h>
#include <sys/stat.h>
#include <stdexcept>
#include <unistd.h>
#include <vector>

namespace ddp::launcher {
namespace fs = std::filesystem;

RunDirectory::RunDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  // getrandom(2), not std::random_device: libstdc++'s calls arc4random,
  // which would make the binary need glibc 2.36 (the wheel's platform tag).
  std::uint64_t bits = 0;
  if (::getrandom(&bits, sizeof(bits), 0) != static_cast<ssize_t>(sizeof(bits)))
    bits = (static_cast<std::uint64_t>(::getpid()) << 32) ^ reinterpret_cast<std::uintptr_t>(this);
  std::ostringstream name;
  name << (tmp && *tmp ? tmp : "/tmp") << "/ddp-launch-" << std::hex << bits;
  path_ = name.str();
}

void RunDirectory::create() {
  // mkdir, not mkdtemp: the name was handed to the watchdog already. A name
  // that exists (64 random bits: another process's) is an error, never reused.
  if (::mkdir(path_.c_str(), 0700) != 0)
    throw std::runtime_error("cannot create the run directory " + path_ + ": " + std::strerror(errno) +
                             " (set TMPDIR to a writable directory)");
  created_ = true;
}

RunDirectory::~RunDirectory() { remove(); }

void RunDirectory::remove() {
  if (keep_ || !created_) return;
  created_ = false;
  // The files we named are all a worker normally leaves; anything else (a
  // worker's temp files) takes the slower recursive removal.
  for (const auto& f : handed_out_) ::unlink(f.c_str());
  if (::rmdir(path_.c_str()) != 0) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

std::string RunDirectory::error_file(int attempt, int local_rank) {
  handed_out_.push_back(path_ + "/attempt_" + std::to_string(attempt) + ".rank_" + std::to_string(local_rank) +
                        ".error.json");
  return handed_out_.back();
}

}  // namespace ddp::launcher
