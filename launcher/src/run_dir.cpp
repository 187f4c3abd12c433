#include "ddp/launcher/run_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unistd.h>
#include <vector>

namespace ddp::launcher {
namespace fs = std::filesystem;

RunDirectory::RunDirectory() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/ddp-launch-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))  // mkdtemp creates it with mode 0700
    throw std::runtime_error("cannot create the run directory " + tmpl + ": " + std::strerror(errno) +
                             " (set TMPDIR to a writable directory)");
  path_ = buf.data();
}

RunDirectory::~RunDirectory() {
  if (keep_) return;
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
