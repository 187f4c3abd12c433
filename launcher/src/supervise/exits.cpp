#include "ddp/launcher/supervise/exits.h"

#include "ddp/common/error_file.h"
#include "ddp/launcher/diagnose/unkillable.h"
#include "ddp/launcher/process/shm_segments.h"

#include <algorithm>
#include <optional>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>

namespace ddp::launcher {

namespace {

std::optional<std::chrono::system_clock::time_point> mtime_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

}  // namespace

WorkerExit reaped_exit(const WorkerGroup::Event& e, int rank, int local_rank, const std::string& error_file) {
  WorkerExit w;
  w.pid = e.pid;
  w.local_rank = local_rank;
  w.rank = rank;
  w.signaled = WIFSIGNALED(e.status);
  w.code = w.signaled ? WTERMSIG(e.status) : WEXITSTATUS(e.status);
  w.time = std::chrono::system_clock::now();
  w.max_rss_kb = e.max_rss_kb;
  w.cpu_s = e.cpu_s;
  w.error_file = error_file;
  if (w.failed()) {
    w.error = read_error_file(w.error_file);
    if (w.error) w.error_time = mtime_of(w.error_file);
  }
  return w;
}

WorkerExit spawn_failure(int lr, int base_rank, const LaunchPlan& plan, const SpawnError& e) {
  WorkerExit w;
  w.local_rank = lr;
  w.rank = base_rank + lr;
  w.code = e.shell_code();
  w.time = std::chrono::system_clock::now();
  if (e.fork_failed) {
    w.spawn_error = "cannot start worker local_rank " + std::to_string(lr) + ": " + e.what() + "; " +
                    std::to_string(lr) + " of " + std::to_string(plan.nproc) + " workers had started";
    const std::string limits = process_limit_text(e.errno_value);
    if (!limits.empty())
      w.spawn_error += "; " + limits + ": give --nproc_per_node " + std::to_string(std::max(1, lr)) +
                       " or less, or raise the limit";
  } else {
    w.spawn_error = "cannot execute " + plan.command.exe + ": " + e.what();
  }
  return w;
}

std::vector<UnkillableProcess> give_up_on_groups(const std::vector<pid_t>& groups, const std::vector<pid_t>& started,
                                                 int base_rank, Watchdog& watchdog, std::ostream& log) {
  std::vector<std::pair<pid_t, int>> by_rank;
  std::string ids;
  std::set<pid_t> leaders;
  for (pid_t g : groups) {
    const auto at = std::find(started.begin(), started.end(), g);
    by_rank.push_back({g, static_cast<int>(at - started.begin())});
    ids += (ids.empty() ? "" : " ") + std::to_string(g);
    watchdog.remove_group(g);
    leaders.insert(g);
  }
  std::vector<UnkillableProcess> left = find_unkillable("/proc", by_rank, base_rank);
  for (const UnkillableProcess& u : left) log << "ddp-launch: " << format_unkillable(u) << std::endl;
  if (left.empty())  // gone between the last reap and now, or out of our sight
    log << "ddp-launch: warning: process group(s) " << ids << " still have processes " << kAfterKillWaitS
        << " s after SIGKILL; going on without them" << std::endl;
  remove_worker_segments(leaders);
  return left;
}

}  // namespace ddp::launcher
