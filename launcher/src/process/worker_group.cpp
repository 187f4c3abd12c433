#include "ddp/launcher/process/worker_group.h"

#include "ddp/common/fd_io.h"

#include "ddp/launcher/process/shm_segments.h"
#include "ddp/launcher/process/standby.h"
#include "ddp/launcher/process/watchdog.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

namespace ddp::launcher {

bool stdin_is_ours() {
  if (!::isatty(0)) return true;
  const pid_t fg = ::tcgetpgrp(0);
  return fg < 0 || fg == ::getpgrp();
}

WorkerGroup::WorkerGroup(const sigset_t& child_mask, Watchdog* watchdog)
    : child_mask_(child_mask), watchdog_(watchdog) {
  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_ < 0) throw std::runtime_error(std::string("cannot open /dev/null: ") + std::strerror(errno));
}

WorkerGroup::~WorkerGroup() {
  if (devnull_ >= 0) ::close(devnull_);
}

void WorkerGroup::set_stdio(SpawnSpec& spec, bool keeps_stdin) const {
  spec.stdin_fd = keeps_stdin ? -1 : devnull_;
  spec.new_session = keeps_stdin && ::isatty(0);
}

void WorkerGroup::track(pid_t pid, int local_rank) {
  workers_.push_back({pid, local_rank, false});
  groups_.push_back(pid);
  ++running_;
}

pid_t WorkerGroup::spawn(SpawnSpec spec, int local_rank, bool keeps_stdin) {
  spec.child_mask = &child_mask_;
  set_stdio(spec, keeps_stdin);
  const pid_t pid = spawn_worker(spec);  // > 1 or it threw
  track(pid, local_rank);
  if (watchdog_) watchdog_->add_group(pid);
  return pid;
}

pid_t WorkerGroup::adopt(Standby& standby, SpawnSpec spec, int local_rank, bool keeps_stdin, std::string& why) {
  set_stdio(spec, keeps_stdin);  // a new session: Standby::adopt refuses it
  const pid_t pid = standby.adopt(spec, why);
  if (pid <= 1) return 0;
  track(pid, local_rank);  // the watchdog has its group since Standby::start
  return pid;
}

std::vector<WorkerGroup::Event> WorkerGroup::reap() {
  std::vector<Event> events;
  for (;;) {
    int status = 0;
    rusage ru{};
    const pid_t pid = ddp::fd::retry_eintr([&] { return ::wait4(-1, &status, WNOHANG | WUNTRACED | WCONTINUED, &ru); });
    if (pid <= 0) break;  // 0: nothing changed; ECHILD: no children at all
    Event e;
    e.pid = pid;
    e.status = status;
    e.kind = WIFSTOPPED(status) ? Event::Stopped : WIFCONTINUED(status) ? Event::Continued : Event::Exited;
    auto it = std::find_if(workers_.begin(), workers_.end(), [&](const Member& m) { return m.pid == pid && !m.reaped; });
    if (watchdog_ && pid == watchdog_->pid() && e.kind == Event::Exited) e.is_watchdog = true;
    else if (it != workers_.end()) {
      e.is_worker = true;
      e.local_rank = it->local_rank;
      if (e.kind == Event::Exited) {
        e.max_rss_kb = ru.ru_maxrss;
        e.cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        it->reaped = true;
        --running_;
      }
    }
    events.push_back(e);
  }
  prune();
  return events;
}

void WorkerGroup::prune() {
  auto gone = [&](pid_t pg) {
    // A worker not yet reaped keeps its group alive (at least as a zombie).
    for (const Member& m : workers_)
      if (m.pid == pg && !m.reaped) return false;
    return ::kill(-pg, 0) != 0 && errno == ESRCH;
  };
  std::set<pid_t> ended;
  for (pid_t pg : groups_)
    if (gone(pg)) ended.insert(pg);
  if (ended.empty()) return;
  remove_worker_segments(ended);  // before the watchdog forgets them
  for (pid_t pg : ended)
    if (watchdog_) watchdog_->remove_group(pg);
  groups_.erase(std::remove_if(groups_.begin(), groups_.end(), [&](pid_t pg) { return ended.count(pg) != 0; }),
                groups_.end());
}

int WorkerGroup::signal_all(int sig) {
  int n = 0;
  for (pid_t pg : groups_) {
    if (pg <= 1) continue;  // never: only successful spawns are listed
    if (::kill(-pg, sig) == 0) ++n;
    if (sig != SIGKILL && sig != SIGCONT) ::kill(-pg, SIGCONT);
  }
  return n;
}

}  // namespace ddp::launcher
