#include "ddp/launcher/run_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <sys/stat.h>
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
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string RunDirectory::error_file(int attempt, int local_rank) const {
  std::string dir = path_ + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(local_rank);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  return dir + "/error.json";
}

}  // namespace ddp::launcher
