#include "ddp/launcher/diagnose/unkillable.h"

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <sstream>

namespace ddp::launcher {

namespace {

constexpr unsigned long kPfExiting = 0x4;  // include/linux/sched.h

std::string read_small(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<pid_t> numeric_entries(const std::string& dir) {
  std::vector<pid_t> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    out.push_back(static_cast<pid_t>(std::atol(name.c_str())));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string trimmed(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

std::optional<ProcSnapshot> snapshot(const std::string& dir) {
  auto s = parse_proc_stat(read_small(dir + "/stat"));
  if (!s) return std::nullopt;
  const std::string w = trimmed(read_small(dir + "/wchan"));
  s->wchan = w == "0" ? "" : w;
  return s;
}

}  // namespace

std::optional<ProcSnapshot> parse_proc_stat(const std::string& text) {
  const auto open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::nullopt;
  ProcSnapshot s;
  s.comm = text.substr(open + 1, close - open - 1);
  std::istringstream rest(text.substr(close + 1));
  std::string state;
  long ppid = 0, pgid = 0, session = 0, tty = 0, tpgid = 0;
  unsigned long flags = 0;
  if (!(rest >> state >> ppid >> pgid >> session >> tty >> tpgid >> flags) || state.size() != 1) return std::nullopt;
  s.state = state[0];
  s.ppid = static_cast<pid_t>(ppid);
  s.pgid = static_cast<pid_t>(pgid);
  s.flags = flags;
  return s;
}

std::string state_name(char state) {
  switch (state) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "in uninterruptible sleep";
    case 'Z': return "a zombie";
    case 'T': return "stopped";
    case 't': return "stopped by a tracer";
    case 'X': return "dead";
    case 'I': return "idle";
    case 'P': return "parked";
    case 'W': return "paging";
    case 'K': return "in killable sleep";
    default: return "in state";
  }
}

std::string format_unkillable(const UnkillableProcess& p) {
  const ProcSnapshot& s = p.proc;
  std::string who = p.worker ? "rank " + std::to_string(p.rank) + " (pid " + std::to_string(p.pid) + ")"
                             : "rank " + std::to_string(p.rank) + "'s process " + std::to_string(p.pid) + " (" +
                                   s.comm + ", in its group)";
  std::string detail = std::string(1, s.state);
  if (!s.wchan.empty()) detail += ", wchan " + s.wchan;
  if (s.tid > 0 && s.tid != p.pid) detail += ", thread " + std::to_string(s.tid);
  if (s.state == 'Z')
    return who + " is a zombie (Z) that its parent (pid " + std::to_string(s.ppid) + ") has not reaped";
  if (s.flags & kPfExiting)
    return who + " has begun to exit but not finished (" + detail + "): the kernel is still releasing it";
  return who + " is " + state_name(s.state) + " (" + detail + ") and cannot be killed";
}

std::string format_unkillable_block(const std::vector<UnkillableProcess>& procs, double after_kill_s,
                                    bool restarts_left) {
  if (procs.empty()) return "";
  std::ostringstream s;
  s << "Not killed (still there " << after_kill_s << " s after SIGKILL; the launcher ended without them"
    << (restarts_left ? "; the group is not restarted: they keep their GPUs, ports and files" : "")
    << "):\n";
  for (const UnkillableProcess& p : procs) s << "  " << format_unkillable(p) << "\n";
  s << "  They end when the kernel lets them (the file server or device answers); until then this node may need "
       "draining (check dmesg)\n";
  return s.str();
}

std::vector<UnkillableProcess> find_unkillable(const std::string& proc_root,
                                               const std::vector<std::pair<pid_t, int>>& groups, int base_rank) {
  std::vector<UnkillableProcess> out;
  if (groups.empty()) return out;
  for (pid_t pid : numeric_entries(proc_root)) {
    const std::string dir = proc_root + "/" + std::to_string(pid);
    auto s = snapshot(dir);
    if (!s) continue;  // gone meanwhile
    const auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == s->pgid; });
    if (g == groups.end()) continue;
    if (s->state != 'D') {
      // A thread stuck in the kernel keeps the whole process: show it.
      for (pid_t tid : numeric_entries(dir + "/task")) {
        if (tid == pid) continue;
        auto t = snapshot(dir + "/task/" + std::to_string(tid));
        if (t && t->state == 'D') {
          t->tid = tid;
          t->comm = s->comm;  // the thread's own name is often a pool's
          s = t;
          break;
        }
      }
    }
    UnkillableProcess u;
    u.local_rank = g->second;
    u.rank = base_rank + g->second;
    u.pid = pid;
    u.worker = pid == g->first;
    u.proc = *s;
    out.push_back(u);
  }
  // The workers first, by rank; then the others.
  std::stable_sort(out.begin(), out.end(), [](const UnkillableProcess& a, const UnkillableProcess& b) {
    return a.worker != b.worker ? a.worker : a.rank < b.rank;
  });
  return out;
}

}  // namespace ddp::launcher
