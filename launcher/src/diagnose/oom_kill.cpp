#include "ddp/launcher/diagnose/oom_kill.h"

#include "ddp/common/fd_io.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::launcher {

namespace {

std::optional<std::string> read_small(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

const char* counter_file(int version) { return version == 2 ? "memory.events" : "memory.oom_control"; }

// The value of `key` in "key value" lines.
std::optional<long long> key_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    std::string k;
    long long v = 0;
    if (l >> k >> v && k == key) return v;
  }
  return std::nullopt;
}

// The cgroup's directory: mount + path, else the mount itself (a container
// that sees its own cgroup as the root of the mount).
std::optional<MemoryCgroup> locate(int version, const std::string& mount, const std::string& path) {
  for (const std::string& dir : {mount + (path == "/" ? "" : path), mount})
    if (exists(dir + "/" + counter_file(version))) return MemoryCgroup{version, dir, mount};
  return std::nullopt;
}

}  // namespace

std::optional<MemoryCgroup> find_memory_cgroup(const std::string& text, const std::string& cgroup_mount) {
  std::istringstream in(text);
  std::optional<std::string> v1, v2;
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    const std::string path = line.substr(b + 1);
    if (controllers.find(",memory,") != std::string::npos) v1 = path;
    else if (line.compare(0, a, "0") == 0 && controllers == ",,") v2 = path;
  }
  if (v1)
    if (auto cg = locate(1, cgroup_mount + "/memory", *v1)) return cg;
  if (v2) {
    if (auto cg = locate(2, cgroup_mount, *v2)) return cg;
    if (auto cg = locate(2, cgroup_mount + "/unified", *v2)) return cg;
  }
  return std::nullopt;
}

std::optional<long long> parse_oom_kill(const std::string& text) { return key_value(text, "oom_kill"); }

std::optional<long long> parse_memory_limit(const std::string& text) {
  const char* p = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(p, &end, 10);
  if (end == p || errno != 0 || v <= 0) return std::nullopt;  // "max", junk
  if (v >= (1LL << 60)) return std::nullopt;                    // v1's "unlimited" (LLONG_MAX, page-rounded)
  return v;
}

std::optional<long long> read_oom_kill_count(const MemoryCgroup& cg) {
  const auto text = read_small(cg.dir + "/" + counter_file(cg.version));
  return text ? parse_oom_kill(*text) : std::nullopt;
}

std::optional<long long> read_memory_limit(const MemoryCgroup& cg) {
  if (cg.version == 1) {
    if (const auto stat = read_small(cg.dir + "/memory.stat"))
      if (const auto v = key_value(*stat, "hierarchical_memory_limit")) return parse_memory_limit(std::to_string(*v));
    const auto own = read_small(cg.dir + "/memory.limit_in_bytes");
    return own ? parse_memory_limit(*own) : std::nullopt;
  }
  std::optional<long long> least;
  for (std::string dir = cg.dir;;) {
    if (const auto text = read_small(dir + "/memory.max"))
      if (const auto v = parse_memory_limit(*text)) least = least ? std::min(*least, *v) : *v;
    if (dir.size() <= cg.root.size()) break;
    const auto slash = dir.rfind('/');
    if (slash == std::string::npos || slash < cg.root.size()) break;
    dir.resize(slash);
  }
  return least;
}

std::string byte_size_text(long long bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  const double tenths = static_cast<double>(static_cast<long long>(v * 10 + 0.5)) / 10;
  if (v >= 100 || tenths == static_cast<double>(static_cast<long long>(tenths)))
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, units[u]);
  return buf;
}

std::string format_oom_kill(int cgroup_version, std::optional<long long> limit_bytes, long max_rss_kb) {
  std::string s = "killed by the kernel's OOM killer (";
  if (cgroup_version == 0)
    s += "named by the kernel log";
  else if (limit_bytes)
    s += std::string(cgroup_version == 2 ? "memory.max " : "memory.limit_in_bytes ") + byte_size_text(*limit_bytes);
  else
    s += "no memory limit on its cgroup: the machine ran out";
  if (max_rss_kb > 0) s += "; peak RSS " + byte_size_text(static_cast<long long>(max_rss_kb) * 1024);
  return s + ")";
}

std::vector<pid_t> parse_oom_victims(const std::string& text) {
  std::vector<pid_t> out;
  static const std::string key = "Killed process ";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + key.size())) {
    const char* p = text.c_str() + at + key.size();
    char* end = nullptr;
    const long pid = std::strtol(p, &end, 10);
    if (end != p && pid > 0 && *end == ' ') out.push_back(static_cast<pid_t>(pid));
  }
  return out;
}

OomWatch::OomWatch(const std::string& proc_root, const std::string& cgroup_mount, const std::string& pid,
                   const std::string& kernel_log) {
  if (const auto text = read_small(proc_root + "/" + pid + "/cgroup")) {
    cg_ = find_memory_cgroup(*text, cgroup_mount);
    if (cg_) baseline_ = read_oom_kill_count(*cg_);
  }
  // Unreadable for most users (kernel.dmesg_restrict): then the counter alone.
  kmsg_ = ::open(kernel_log.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (kmsg_ >= 0) ::lseek(kmsg_, 0, SEEK_END);
}

OomWatch::~OomWatch() {
  if (kmsg_ >= 0) ::close(kmsg_);
}

void OomWatch::read_kernel_log() {
  if (kmsg_ < 0) return;
  // /dev/kmsg gives one record per read; EAGAIN: no more; EPIPE: records
  // were overwritten meanwhile (the next read goes on). A file ends with 0.
  char buf[8192];
  for (int reads = 0; reads < 100000; ++reads) {
    const ssize_t n = ddp::fd::read_some(kmsg_, buf, sizeof(buf));
    if (n < 0 && errno == EPIPE) continue;
    if (n <= 0) break;
    for (pid_t p : parse_oom_victims(std::string(buf, static_cast<size_t>(n)))) victims_.push_back(p);
  }
}

std::string OomWatch::explain_sigkill(pid_t pid, long max_rss_kb) {
  read_kernel_log();
  const bool named = std::find(victims_.begin(), victims_.end(), pid) != victims_.end();
  std::optional<long long> now;
  if (cg_ && baseline_) now = read_oom_kill_count(*cg_);
  const bool counted = now && *now - *baseline_ > explained_;
  if (!named && !counted) return "";
  if (counted) ++explained_;
  return format_oom_kill(cg_ ? cg_->version : 0, cg_ ? read_memory_limit(*cg_) : std::nullopt, max_rss_kb);
}

}  // namespace ddp::launcher
