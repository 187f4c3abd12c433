#include "sandbox.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.h"

namespace ddp::test {
namespace fs = std::filesystem;

namespace {

const char* kMarkerVar = "DDP_RELIABILITY_MARKER";

std::vector<std::string> list_recursive(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().string());
  return out;
}

std::vector<std::string> dev_shm_segments() {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it("/dev/shm", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("ddp-shm-", 0) == 0) out.push_back(it->path().string());
  }
  return out;
}

// A private mount namespace whose /dev/shm is a directory of ours: needs
// unshare(1) and the right to mount (root, or a user namespace).
bool can_make_private_shm() {
  static const bool can = [] {
    TempDir d;
    auto r = run({"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                  "mount --bind \"$0\" /dev/shm && touch /dev/shm/probe", d.path()},
                 {}, 30);
    return r.exit_code == 0 && fs::exists(d.file("probe"));
  }();
  return can;
}

}  // namespace

std::string Leftovers::describe() const {
  std::ostringstream s;
  for (const auto& p : processes) s << "  process " << p << "\n";
  for (const auto& f : tmp_files) s << "  file " << f << "\n";
  for (const auto& g : segments) s << "  segment " << g << "\n";
  return s.str();
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long v = std::strtol(e->d_name, &end, 10);
    if (end && *end == '\0' && v > 0) out.push_back(static_cast<pid_t>(v));
  }
  ::closedir(d);
  return out;
}

std::optional<ProcStat> stat_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  const auto lp = line.find('('), rp = line.rfind(')');
  if (lp == std::string::npos || rp == std::string::npos || rp + 4 >= line.size()) return std::nullopt;
  ProcStat s;
  s.comm = line.substr(lp + 1, rp - lp - 1);
  std::istringstream rest(line.substr(rp + 2));
  std::string state;
  rest >> state >> s.ppid;
  s.state = state.empty() ? '?' : state[0];
  return s;
}

std::map<std::string, std::string> environment_of(pid_t pid) {
  std::map<std::string, std::string> env;
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  for (std::string kv; std::getline(in, kv, '\0');) {
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

Sandbox::Sandbox(const std::string& name) {
  // Every process that outlives its parent now comes to us, not to init:
  // nothing of a run can vanish from view, and zombies stay visible.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  static std::atomic<int> serial{0};
  std::random_device rd;
  marker_ = name + "-" + std::to_string(::getpid()) + "-" + std::to_string(serial++) + "-" + std::to_string(rd());
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/ddp-reliability-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  root_ = buf.data();
  for (const char* sub : {"/tmp", "/shm", "/work"}) fs::create_directories(root_ + sub);
  private_shm_ = can_make_private_shm();
  if (!private_shm_) shm_before_ = dev_shm_segments();
}

Sandbox::~Sandbox() {
  clean_up();
  std::error_code ec;
  fs::remove_all(root_, ec);
}

std::map<std::string, std::string> Sandbox::env(std::map<std::string, std::string> extra) const {
  extra["TMPDIR"] = tmp();
  extra[kMarkerVar] = marker_;
  return extra;
}

std::vector<std::string> Sandbox::wrap(const std::vector<std::string>& argv) const {
  if (!private_shm_) return argv;
  std::vector<std::string> out = {"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                                  "mount --bind \"$0\" /dev/shm && exec \"$@\"", shm()};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

namespace {

// The run's processes: the test's children (orphans come to it) and every
// process with the marker.
std::vector<std::pair<pid_t, ProcStat>> run_processes(const std::string& marker) {
  std::vector<std::pair<pid_t, ProcStat>> out;
  const pid_t self = ::getpid();
  for (pid_t pid : all_pids()) {
    if (pid == self) continue;
    auto st = stat_of(pid);
    if (!st) continue;
    bool ours = st->ppid == self;
    if (!ours) {
      auto env = environment_of(pid);
      auto it = env.find(kMarkerVar);
      ours = it != env.end() && it->second == marker;
    }
    if (ours) out.emplace_back(pid, *st);
  }
  return out;
}

std::vector<std::string> describe_processes(const std::string& marker, bool allow_zombies) {
  std::vector<std::string> out;
  for (const auto& [pid, st] : run_processes(marker)) {
    if (allow_zombies && (st.state == 'Z' || st.state == 'X')) continue;
    out.push_back(std::to_string(pid) + " (" + st.comm + ") state " + std::string(1, st.state));
  }
  return out;
}

}  // namespace

Leftovers Sandbox::leftovers(bool allow_zombies, double settle_s, const std::string& launcher_output) {
  Leftovers l;
  if (settle_s > 0) wait_until([&] { return describe_processes(marker_, allow_zombies).empty(); }, settle_s);
  l.processes = describe_processes(marker_, allow_zombies);
  for (const auto& p : l.processes)
    if (p.size() > 8 && p.compare(p.size() - 8, 8, " state Z") == 0) ++l.zombies;
  std::vector<std::string> kept;
  // "the error files above are kept in DIR", "the error files and stack dumps above ...".
  const std::string said = " above are kept in ";
  for (auto at = launcher_output.find(said); at != std::string::npos; at = launcher_output.find(said, at + 1)) {
    const auto begin = at + said.size();
    const auto end = launcher_output.find(" (remove it when done)", begin);
    if (end != std::string::npos) kept.push_back(launcher_output.substr(begin, end - begin));
  }
  for (const auto& f : list_recursive(tmp())) {
    bool is_kept = false;
    for (const auto& k : kept) is_kept = is_kept || f == k || f.rfind(k + "/", 0) == 0;
    if (!is_kept) l.tmp_files.push_back(f);
  }
  if (private_shm_) {
    l.segments = list_recursive(shm());
  } else {
    for (const auto& s : dev_shm_segments())
      if (std::find(shm_before_.begin(), shm_before_.end(), s) == shm_before_.end()) l.segments.push_back(s);
  }
  return l;
}

void Sandbox::clean_up() {
  for (const auto& [pid, st] : run_processes(marker_))
    if (st.state != 'Z') ::kill(pid, SIGKILL);
  const pid_t self = ::getpid();
  wait_until(
      [&] {
        bool any = false;
        for (const auto& [pid, st] : run_processes(marker_)) {
          if (st.ppid == self) ::waitpid(pid, nullptr, WNOHANG);
          any = true;
        }
        return !any;
      },
      10);
}

std::vector<pid_t> Sandbox::find(const std::map<std::string, std::string>& want) const {
  std::vector<pid_t> out;
  for (pid_t pid : all_pids()) {
    auto env = environment_of(pid);
    auto it = env.find(kMarkerVar);
    if (it == env.end() || it->second != marker_) continue;
    bool match = true;
    for (const auto& [k, v] : want) {
      auto e = env.find(k);
      if (e == env.end() || e->second != v) match = false;
    }
    auto st = stat_of(pid);
    if (match && st && st->state != 'Z') out.push_back(pid);
  }
  return out;
}

std::optional<pid_t> Sandbox::wait_for(const std::map<std::string, std::string>& want, double timeout_s) const {
  std::optional<pid_t> found;
  wait_until(
      [&] {
        auto v = find(want);
        if (v.size() == 1) found = v[0];
        return found.has_value();
      },
      timeout_s);
  return found;
}

}  // namespace ddp::test
