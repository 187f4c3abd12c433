#include "ddp/launcher/supervisor.h"

#include "ddp/common/error_file.h"
#include "ddp/launcher/run_dir.h"
#include "ddp/launcher/signals.h"
#include "ddp/launcher/spawn.h"
#include "ddp/launcher/worker_env.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ddp::launcher {

using Clock = std::chrono::steady_clock;

int reserve_check_port(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket failed: ") + std::strerror(errno));
  // TCPStore sets SO_REUSEADDR too, so a port in TIME_WAIT is not "in use".
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(port == 0 ? INADDR_LOOPBACK : INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int e = errno;
    ::close(fd);
    if (e == EADDRINUSE)
      throw UsageError("--master_port " + std::to_string(port) +
                       " is already in use on this node (another job, or workers of an earlier run "
                       "still alive); pick another --master_port or use --standalone for a free one");
    throw UsageError("--master_port " + std::to_string(port) + " cannot be used: " + std::strerror(e));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// One attempt of the group: spawn, wait, tear down.
class Attempt {
 public:
  Attempt(const SupervisorConfig& cfg, RunDirectory& dir, SignalChannel& signals, int attempt, int port)
      : cfg_(cfg), dir_(dir), signals_(signals), port_(port) {
    result_.attempt = attempt;
  }

  AttemptResult run() {
    start_workers();
    while (!live_.empty()) wait_for_event();
    // Descendants that outlived their worker would hold ports and files into
    // the next attempt: after a teardown nothing of this group survives.
    if (stopping_)
      for (pid_t pg : groups_) ::kill(-pg, SIGKILL);
    return result_;
  }

 private:
  void start_workers() {
    GroupSpec spec;
    spec.opts = &cfg_.opts;
    spec.nproc = cfg_.nproc;
    spec.master_port = port_;
    spec.restart_count = result_.attempt;
    spec.omp_threads = cfg_.omp_threads;
    for (int lr = 0; lr < cfg_.nproc; ++lr) {
      const std::string err_file = dir_.error_file(result_.attempt, lr);
      const EnvMap env = worker_environment(cfg_.parent_env, spec, lr, err_file);
      try {
        pid_t pid = spawn_worker(cfg_.command.exe, cfg_.command.argv_for(lr), env, signals_.original_mask());
        live_[pid] = {lr, err_file};
        groups_.push_back(pid);
      } catch (const SpawnError& e) {
        WorkerExit w;
        w.local_rank = lr;
        w.rank = cfg_.opts.node_rank * cfg_.nproc + lr;
        w.code = e.shell_code();
        w.time = std::chrono::system_clock::now();
        w.spawn_error = "cannot execute " + cfg_.command.exe + ": " + e.what();
        result_.exits.push_back(w);
        result_.root_cause = w;
        begin_stop(SIGTERM);
        return;
      }
    }
  }

  void begin_stop(int sig) {
    for (pid_t pg : groups_) ::kill(-pg, sig);  // ESRCH: group already gone, fine
    if (!stopping_) {
      stopping_ = true;
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(cfg_.opts.shutdown_timeout_s));
    }
  }

  void kill_all() {
    for (pid_t pg : groups_) ::kill(-pg, SIGKILL);
    killed_ = true;
  }

  void wait_for_event() {
    int timeout_ms = -1;
    if (stopping_ && !killed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<long long>(0, left));
    }
    pollfd p{signals_.fd(), POLLIN, 0};
    int r = ::poll(&p, 1, timeout_ms);
    if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    if (r == 0) {  // grace period over
      kill_all();
      return;
    }
    for (int sig : signals_.drain()) {
      if (!SignalChannel::is_forwarded(sig)) continue;  // SIGCHLD: reaped below
      if (result_.launcher_signal && sig == SIGINT) {
        kill_all();  // a second Ctrl-C means now
        continue;
      }
      if (!result_.launcher_signal) result_.launcher_signal = sig;
      begin_stop(sig);  // forwards sig to every group and starts the grace period
    }
    reap();
  }

  void reap() {
    const bool was_stopping = stopping_;
    for (;;) {
      int status = 0;
      rusage ru{};
      pid_t pid = ::wait4(-1, &status, WNOHANG, &ru);
      if (pid <= 0) return;  // 0: none exited; ECHILD: no children left
      auto it = live_.find(pid);
      if (it == live_.end()) continue;  // an orphaned descendant we adopted as subreaper
      WorkerExit w;
      w.pid = pid;
      w.local_rank = it->second.local_rank;
      w.rank = cfg_.opts.node_rank * cfg_.nproc + w.local_rank;
      w.signaled = WIFSIGNALED(status);
      w.code = w.signaled ? WTERMSIG(status) : WEXITSTATUS(status);
      w.time = std::chrono::system_clock::now();
      w.after_teardown = was_stopping;
      w.max_rss_kb = ru.ru_maxrss;
      w.error_file = it->second.error_file;
      if (w.failed()) w.error = read_error_file(w.error_file);
      live_.erase(it);
      result_.exits.push_back(w);
      if (w.failed() && !stopping_) {
        result_.root_cause = w;
        begin_stop(SIGTERM);
      }
    }
  }

  struct Live {
    int local_rank;
    std::string error_file;
  };

  const SupervisorConfig& cfg_;
  RunDirectory& dir_;
  SignalChannel& signals_;
  int port_;
  AttemptResult result_;
  std::map<pid_t, Live> live_;
  std::vector<pid_t> groups_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point deadline_;
};

}  // namespace

Supervisor::Supervisor(SupervisorConfig cfg, std::ostream& log) : cfg_(std::move(cfg)), log_(log) {}

int Supervisor::run() {
  // Adopt orphaned grandchildren so they are reaped here, not left as zombies.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  SignalChannel signals;
  RunDirectory dir;
  const std::string host = hostname();

  for (int attempt = 0;; ++attempt) {
    const int port = cfg_.opts.standalone ? reserve_check_port(0) : cfg_.opts.master_port;
    attempts_.push_back(Attempt(cfg_, dir, signals, attempt, port).run());
    const AttemptResult& a = attempts_.back();
    if (a.succeeded()) return 0;
    if (a.launcher_signal || attempt >= cfg_.opts.max_restarts) break;
    log_ << format_restart_line(a, cfg_.opts.max_restarts) << std::endl;
  }
  log_ << format_failure_report(attempts_, host, cfg_.opts.max_restarts) << std::flush;
  const AttemptResult& last = attempts_.back();
  return last.launcher_signal ? 128 + last.launcher_signal : last.root_cause->shell_code();
}

}  // namespace ddp::launcher
