#include "ddp/launcher/progress_watch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <stdexcept>
#include <sys/syscall.h>
#include <unistd.h>

namespace ddp::launcher {

using Clock = StallDetector::Clock;

namespace {

// The whole of a small /proc file ("" when it cannot be read).
std::string read_small(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

std::vector<std::pair<pid_t, double>> process_group_cpu_seconds(const std::vector<pid_t>& pgids) {
  static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::vector<std::pair<pid_t, double>> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (const dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string stat = read_small(std::string("/proc/") + e->d_name + "/stat");
    // The name (field 2) may hold spaces and parentheses: fields count from the last ')'.
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    const char* p = stat.c_str() + close + 1;
    long long f[16] = {};  // fields 3..17; field 3 (the state) is a letter
    char* end = nullptr;
    while (*p == ' ') ++p;
    ++p;  // the state
    int got = 0;
    for (int i = 4; i <= 17; ++i, ++got) {
      f[i - 2] = std::strtoll(p, &end, 10);
      if (end == p) break;
      p = end;
    }
    if (got < 14) continue;
    const pid_t pgrp = static_cast<pid_t>(f[5 - 2]);
    if (std::find(pgids.begin(), pgids.end(), pgrp) == pgids.end()) continue;
    const double cpu = static_cast<double>(f[14 - 2] + f[15 - 2] + f[16 - 2] + f[17 - 2]) / ticks;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == pgrp; });
    if (it == out.end()) out.emplace_back(pgrp, cpu);
    else it->second += cpu;
  }
  ::closedir(proc);
  return out;
}

std::optional<bool> blocked_in_futex(pid_t pid) {
  // "202 0x... ..." in a system call, "running", or "-1 ..." (blocked outside one).
  const std::string text = read_small("/proc/" + std::to_string(pid) + "/syscall");
  if (text.empty()) return std::nullopt;
  if (text.compare(0, 7, "running") == 0) return false;
  char* end = nullptr;
  const long nr = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;
  return nr == SYS_futex;
}

ProgressWatch::ProgressWatch(double stall_timeout_s) {
  if (stall_timeout_s > 0) detector_.emplace(stall_timeout_s);
  next_look_ = Clock::now();
}

ProgressWatch::Worker* ProgressWatch::worker(int local_rank) {
  for (Worker& w : workers_)
    if (w.local_rank == local_rank) return &w;
  return nullptr;
}

std::string ProgressWatch::create_heartbeat(int local_rank, const std::string& path) {
  Worker w;
  w.local_rank = local_rank;
  try {
    w.page = Heartbeat::create(path);
  } catch (const std::runtime_error& e) {
    if (!warned_) {
      warned_ = true;
      warning_ = std::string("ddp-launch: warning: ") + e.what() +
                 "; workers without one are watched by CPU time and output only (--stall_timeout)";
    }
  }
  const std::string made = w.page ? path : "";
  workers_.push_back(std::move(w));
  return made;
}

void ProgressWatch::started(int local_rank, int rank, pid_t pid) {
  if (detector_) detector_->add(local_rank, rank, pid, Clock::now());
}

void ProgressWatch::exited(int local_rank) {
  if (detector_) detector_->remove(local_rank);
}

void ProgressWatch::note_output(int local_rank) {
  if (detector_) detector_->note_output(local_rank, Clock::now());
}

std::optional<HeartbeatSnapshot> ProgressWatch::heartbeat(int local_rank) const {
  for (const Worker& w : workers_)
    if (w.local_rank == local_rank && w.page) {
      const HeartbeatSnapshot s = w.page->read();
      if (s.pid != 0) return s;
    }
  return std::nullopt;
}

int ProgressWatch::ms_to_check() const {
  if (!detector_ || decided_) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_look_ - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, left));
}

void ProgressWatch::look(Clock::time_point now) {
  // One /proc scan for all ranks, and only when some rank is judged by it.
  std::vector<pid_t> plain;
  for (const RankProgress& r : detector_->ranks())
    if (!r.heartbeat) plain.push_back(r.pid);
  std::vector<std::pair<pid_t, double>> cpu;
  if (!plain.empty()) cpu = process_group_cpu_seconds(plain);
  struct Id {
    int local_rank;
    pid_t pid;
    double cpu_s;
  };
  std::vector<Id> ids;  // observe() writes into ranks(): not iterated meanwhile
  for (const RankProgress& r : detector_->ranks()) ids.push_back({r.local_rank, r.pid, r.cpu_s});
  for (Id& id : ids) {
    // A group gone from /proc (between exit and reaping) keeps its last CPU time.
    for (const auto& g : cpu)
      if (g.first == id.pid) id.cpu_s = g.second;
    std::optional<HeartbeatSnapshot> hb;
    if (Worker* w = worker(id.local_rank); w && w->page) hb = w->page->read();
    detector_->observe(id.local_rank, hb, id.cpu_s, now);
  }
}

std::optional<StallVerdict> ProgressWatch::check() {
  if (!detector_ || decided_) return std::nullopt;
  const Clock::time_point now = Clock::now();
  if (now < next_look_) return std::nullopt;
  look(now);
  // Look again after one interval, or exactly when the stall would be due.
  next_look_ = std::min(now + detector_->interval(), std::max(now, detector_->deadline()));
  if (!detector_->stalled(now)) return std::nullopt;
  decided_ = true;
  std::vector<RankProgress> ranks = detector_->ranks();
  for (RankProgress& r : ranks)
    if (!r.heartbeat) r.in_futex = blocked_in_futex(r.pid);
  return decide_stall(ranks, now, detector_->timeout_s());
}

std::string ProgressWatch::take_warning() {
  std::string w;
  w.swap(warning_);
  return w;
}

}  // namespace ddp::launcher
