#include "ddp/launcher/output/log_dir.h"

#include "ddp/launcher/config/options.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace ddp::launcher {
namespace fs = std::filesystem;

namespace {

std::string mkdtemp_or_empty(const std::string& tmpl, int& err) {
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {  // mode 0700
    err = errno;
    return "";
  }
  return buf.data();
}

// mkdir -p with 0700 for each directory it makes.
void make_dirs(const std::string& path, const std::string& what) {
  std::string part;
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    part = path.substr(0, slash);
    if (!part.empty() && ::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      throw UsageError(what + ": cannot create directory '" + part + "': " + std::strerror(errno) +
                       "; give a writable directory");
    }
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw UsageError(what + ": '" + path + "' is not a directory; give a directory for the logs");
}

}  // namespace

std::string make_run_log_dir(const std::string& base_in, const std::string& what, const std::string& run_id,
                             const std::string& tmpdir) {
  std::string base = base_in;
  int err = 0;
  if (base.empty()) {
    base = mkdtemp_or_empty((tmpdir.empty() ? "/tmp" : tmpdir) + "/ddp-launch-logs-XXXXXX", err);
    if (base.empty())
      throw UsageError("cannot create a log directory in " + (tmpdir.empty() ? std::string("/tmp") : tmpdir) + ": " +
                       std::strerror(err) + "; give --log_dir or set TMPDIR to a writable directory");
  } else {
    make_dirs(base, what);
  }
  // Absolute, as torchrun's: a worker that changes directory still finds
  // its TORCHELASTIC_ERROR_FILE, and the report's paths work from anywhere.
  std::error_code ec;
  const fs::path abs = fs::absolute(base, ec);
  if (!ec) base = abs.lexically_normal().string();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  if (run_id.find('/') != std::string::npos)
    throw UsageError("--rdzv_id '" + run_id + "' has a '/', but it names a directory under the log directory; "
                     "give an id without '/'");
  const std::string run = mkdtemp_or_empty(base + "/" + run_id + "_XXXXXX", err);
  if (run.empty())
    throw UsageError(what + ": cannot create a directory in '" + base + "': " + std::strerror(err) +
                     "; give a writable directory");
  return run;
}

std::string make_attempt_log_dir(const std::string& run_log_dir, int attempt) {
  const std::string dir = run_log_dir + "/attempt_" + std::to_string(attempt);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (::mkdir(dir.c_str(), 0700) != 0)
    throw std::runtime_error("cannot create log directory " + dir + ": " + std::strerror(errno));
  return dir;
}

RankLogPaths make_rank_log_dir(const std::string& attempt_dir, int local_rank) {
  RankLogPaths p;
  p.dir = attempt_dir + "/" + std::to_string(local_rank);
  if (::mkdir(p.dir.c_str(), 0700) != 0) {
    if (errno != EEXIST) throw std::runtime_error("cannot create log directory " + p.dir + ": " + std::strerror(errno));
    // Made already by an earlier call: only a real directory of ours, never
    // a symlink or someone else's directory planted there.
    struct stat st;
    if (::lstat(p.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
      throw std::runtime_error("cannot create log directory " + p.dir +
                               ": the path exists and is not a directory this user made");
  }
  p.stdout_log = p.dir + "/stdout.log";
  p.stderr_log = p.dir + "/stderr.log";
  p.error_file = p.dir + "/error.json";
  return p;
}

int open_log_file(const std::string& path) {
  // O_EXCL | O_NOFOLLOW: a log file is always new (its attempt directory
  // was just made), so anything at its path was planted; never followed.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot open log file " + path + ": " + std::strerror(errno));
  return fd;
}

}  // namespace ddp::launcher
