#include "ddp/launcher/watch/progress_watch.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unordered_map>

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
  std::vector<pid_t> wanted = pgids;
  std::sort(wanted.begin(), wanted.end());
  std::unordered_map<pid_t, double> sums;
  DIR* proc = ::opendir("/proc");
  if (!proc) return {};
  while (const dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string stat = read_small(std::string("/proc/") + e->d_name + "/stat");
    // The name (field 2) may hold spaces and parentheses: fields count from the last ')'.
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 3 >= stat.size()) continue;
    const char* p = stat.c_str() + close + 3;  // past ") " and the state letter (field 3)
    long long f[18] = {};                      // f[i]: field i, 4..17
    int i = 4;
    for (char* end = nullptr; i <= 17; ++i, p = end) {
      f[i] = std::strtoll(p, &end, 10);
      if (end == p) break;
    }
    if (i <= 17) continue;
    const pid_t pgrp = static_cast<pid_t>(f[5]);
    if (!std::binary_search(wanted.begin(), wanted.end(), pgrp)) continue;
    // utime, stime, and the same of its children it waited for.
    sums[pgrp] += static_cast<double>(f[14] + f[15] + f[16] + f[17]) / ticks;
  }
  ::closedir(proc);
  return {sums.begin(), sums.end()};
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

char process_state(pid_t pid) {
  const std::string stat = read_small("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');  // the name (field 2) may hold spaces and parentheses
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

ProgressWatch::ProgressWatch(double stall_timeout_s, const HeartbeatPages& pages, bool whole_job_here)
    : pages_(pages), whole_job_here_(whole_job_here) {
  if (stall_timeout_s > 0) detector_.emplace(stall_timeout_s);
  next_look_ = Clock::now();
}

void ProgressWatch::started(int local_rank, int rank, pid_t pid) {
  if (local_rank >= 0 && static_cast<size_t>(local_rank) >= ranks_.size())
    ranks_.resize(static_cast<size_t>(local_rank) + 1, -1);
  if (local_rank >= 0) ranks_[local_rank] = rank;
  if (detector_) detector_->add(local_rank, rank, pid, Clock::now());
}

void ProgressWatch::exited(int local_rank) {
  if (detector_) detector_->remove(local_rank);
}

void ProgressWatch::note_output(int local_rank) {
  if (detector_) detector_->note_output(local_rank, Clock::now());
}

std::string ProgressWatch::collective_summary() const {
  std::vector<RankProgress> ranks;
  for (size_t lr = 0; lr < ranks_.size(); ++lr) {
    const std::shared_ptr<const Heartbeat> page = pages_.page(static_cast<int>(lr));
    if (!page || ranks_[lr] < 0) continue;
    RankProgress r;
    r.rank = ranks_[lr];
    r.local_rank = static_cast<int>(lr);
    r.snapshot = page->read();
    r.heartbeat = r.snapshot.pid != 0 && (r.snapshot.collective_started > 0 || r.snapshot.step > 0);
    ranks.push_back(r);
  }
  return launcher::collective_summary(ranks);
}

int ProgressWatch::ms_to_check() const {
  if (!detector_ || decided_) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next_look_ - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, left));
}

void ProgressWatch::look(Clock::time_point now) {
  const std::vector<RankProgress> ranks = detector_->ranks();
  // One /proc scan for all ranks, and only when some rank is judged by it.
  std::vector<pid_t> plain;
  for (const RankProgress& r : ranks)
    if (!r.heartbeat) plain.push_back(r.pid);
  std::unordered_map<pid_t, double> cpu;
  if (!plain.empty())
    for (const auto& [pgid, s] : process_group_cpu_seconds(plain)) cpu[pgid] = s;
  for (const RankProgress& r : ranks) {
    // A group gone from /proc (between exit and reaping) keeps its last CPU time.
    const auto it = cpu.find(r.pid);
    std::optional<HeartbeatSnapshot> hb;
    if (const std::shared_ptr<const Heartbeat> p = pages_.page(r.local_rank)) hb = p->read();
    detector_->observe(r.local_rank, hb, it == cpu.end() ? r.cpu_s : it->second, now);
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
  for (RankProgress& r : ranks) {
    if (!r.heartbeat) r.in_futex = blocked_in_futex(r.pid);
    r.state = process_state(r.pid);
  }
  return decide_stall(ranks, now, detector_->timeout_s(), whole_job_here_);
}

}  // namespace ddp::launcher
