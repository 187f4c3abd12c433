#include "ddp/launcher/supervise/supervisor.h"

#include "ddp/common/atomic_file.h"
#include "ddp/common/output_file.h"
#include "ddp/common/error_file.h"
#include "ddp/launcher/report/event_log.h"
#include "ddp/launcher/diagnose/flight_recorder.h"
#include "ddp/launcher/watch/file_timer_server.h"
#include "ddp/launcher/output/log_dir.h"
#include "ddp/launcher/config/log_spec.h"
#include "ddp/launcher/output/output_tail.h"
#include "ddp/launcher/diagnose/oom_kill.h"
#include "ddp/launcher/output/output_tee.h"
#include "ddp/launcher/watch/progress_watch.h"
#include "ddp/launcher/elastic/rdzv_agent.h"
#include "ddp/launcher/process/run_dir.h"
#include "ddp/launcher/process/signals.h"
#include "ddp/launcher/process/spawn.h"
#include "ddp/launcher/diagnose/stderr_failure.h"
#include "ddp/launcher/output/stderr_relay.h"
#include "ddp/launcher/diagnose/stack_dump.h"
#include "ddp/launcher/report/summary.h"
#include "ddp/launcher/process/shm_segments.h"
#include "ddp/launcher/diagnose/unkillable.h"
#include "ddp/launcher/process/watchdog.h"
#include "ddp/launcher/process/worker_group.h"
#include "ddp/launcher/config/worker_env.h"

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

// --event_log_handler console: what every event of this run carries.
StatusEvent run_event(const LaunchPlan& cfg, const std::string& state, const AttemptResult& a) {
  StatusEvent e;
  e.state = state;
  e.run_id = cfg.opts.run_id;
  e.role = cfg.opts.role;
  e.hostname = hostname();
  e.rdzv_backend = cfg.opts.rdzv.backend;
  const auto slash = cfg.command.exe.rfind('/');
  e.entry_point = slash == std::string::npos ? cfg.command.exe : cfg.command.exe.substr(slash + 1);
  e.group_rank = a.group_rank;
  e.group_world_size = a.group_world_size;
  e.agent_restarts = a.restart_count;
  return e;
}

StatusEvent worker_event(const LaunchPlan& cfg, const std::string& state, const AttemptResult& a, int local_rank,
                         pid_t pid) {
  StatusEvent e = run_event(cfg, state, a);
  e.worker = true;
  e.local_rank = local_rank;
  e.global_rank = a.base_rank + local_rank;
  e.role_world_size = a.world_size;
  e.worker_id = pid;
  return e;
}

// --event_log_handler console at the end of a run: each worker of the last
// attempt (unless a signal stopped the launcher: torchrun then records only
// its own failure), then the agent's outcome.
std::string final_events(const LaunchPlan& cfg, const std::vector<AttemptResult>& attempts,
                         const std::string& rdzv_error, int rdzv_signal, double wall_s) {
  AttemptResult none;
  none.group_rank = cfg.opts.node_rank;
  none.group_world_size = cfg.opts.nnodes;
  const AttemptResult& last = attempts.empty() ? none : attempts.back();
  const int sig = rdzv_signal ? rdzv_signal : last.launcher_signal ? last.launcher_signal : last.signal_during_teardown;
  const long long run_time = static_cast<long long>(wall_s);
  std::string out;
  if (!attempts.empty() && !sig && rdzv_error.empty()) {
    std::vector<WorkerExit> exits = last.exits;
    std::sort(exits.begin(), exits.end(), [](const WorkerExit& a, const WorkerExit& b) { return a.local_rank < b.local_rank; });
    for (const WorkerExit& w : exits) {
      const std::string state = w.failed() ? "FAILED" : last.succeeded() ? "SUCCEEDED" : "TERMINATED";
      StatusEvent e = worker_event(cfg, state, last, w.local_rank, w.pid);
      e.global_rank = w.rank;
      e.total_run_time = run_time;
      if (w.failed()) {
        e.raw_error = event_raw_error(w.error_file);
        e.exit_code = w.signaled ? -w.code : w.code;  // Popen's returncode
        e.worker_pid = w.pid;
      }
      out += format_status_event(e);
    }
  }
  StatusEvent agent = run_event(cfg, sig || !rdzv_error.empty() ? "FAILED" : "SUCCEEDED", last);
  agent.total_run_time = run_time;
  if (sig) agent.raw_error = "SignalException: Process " + std::to_string(::getpid()) + " got signal: " + std::to_string(sig);
  else if (!rdzv_error.empty()) agent.raw_error = rdzv_error;
  return out + format_status_event(agent);
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// A stack dump of every rank is bounded by this (tools still running then
// are killed); eu-stack takes well under a second for 8 ranks (docs/benchmarks.md).
constexpr double kStackDumpTimeoutS = 5.0;

std::optional<std::chrono::system_clock::time_point> mtime_of(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

// What the supervisor remembers of a running worker.
struct Live {
  int local_rank = 0;
  std::string error_file;
  std::string stdout_log, stderr_log;  // "" when that stream is not in a file
  Clock::time_point start;
};

// What an attempt's workers are told of their place: static rendezvous
// fills it from the options, a c10d round from the rendezvous.
struct AttemptSetup {
  int port = 0;
  int restart_count = 0;
  std::optional<NodePlacement> placement;
  RdzvAgent* agent = nullptr;  // c10d: told of a local failure, may stop the workers
  std::string node;            // "node n1 (host h)" in messages to other nodes
  FileTimerServer* timers = nullptr;  // TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file timer
};

// One attempt of the group: spawn, supervise, tear down, and wait until no
// process of its groups is left.
class Attempt {
 public:
  Attempt(const LaunchPlan& cfg, RunDirectory& dir, SignalChannel& signals, Watchdog& watchdog, int attempt,
          AttemptSetup setup, bool stdin_to_rank0, std::ostream& log)
      : cfg_(cfg),
        dir_(dir),
        signals_(signals),
        watchdog_(watchdog),
        group_(signals.original_mask(), &watchdog),
        setup_(std::move(setup)),
        base_rank_(setup_.placement ? setup_.placement->base_rank : cfg.opts.node_rank * cfg.nproc),
        stdin_to_rank0_(stdin_to_rank0),
        log_(log),
        stderr_tails_(static_cast<size_t>(cfg.nproc)),
        progress_(cfg.opts.stall_timeout_s) {
    result_.attempt = attempt;
    result_.restart_count = setup_.restart_count;
    result_.group_rank = setup_.placement ? setup_.placement->group_rank : cfg.opts.node_rank;
    result_.group_world_size = setup_.placement ? setup_.placement->group_world_size : cfg.opts.nnodes;
    result_.world_size = setup_.placement ? setup_.placement->world_size : cfg.opts.nnodes * cfg.nproc;
    result_.base_rank = base_rank_;
  }

  // c10d: whether this node told the rendezvous of its own failure.
  bool told_failure() const { return told_failure_; }

  ~Attempt() {
    if (devnull_w_ >= 0) ::close(devnull_w_);
  }

  AttemptResult run() {
    start_workers();
    record_starts();
    while (!group_.empty()) {
      // Every worker is gone but its group is not (a DataLoader-style child,
      // a daemon): nothing of this attempt may outlive it. SIGTERM even when
      // a forwarded SIGINT/SIGQUIT started the teardown: background children
      // of shells ignore those two.
      if (group_.running_workers() == 0 && !leftovers_termed_) {
        leftovers_termed_ = true;
        if (stopping_) group_.signal_all(SIGTERM);
        else begin_stop(SIGTERM);
      }
      if (!wait_for_event()) break;
    }
    if (tee_) {
      tee_->finish();  // the workers are gone: what they wrote is all in the pipes
      warn_tee();
    }
    if (relay_) relay_->finish();
    explain_failures();
    if (spawn_failure_) result_.root_cause = spawn_failure_;
    else if (stall_) result_.root_cause = stalled_exit();
    else if (failure_seen_) result_.root_cause = earliest_failure(result_.exits);
    if (!result_.succeeded()) result_.fr_dumps = new_dumps(fr_before_, list_flight_recorder_files(result_.fr_prefix));
    return result_;
  }

 private:
  void start_workers() {
    GroupSpec spec;
    spec.opts = &cfg_.opts;
    spec.nproc = cfg_.nproc;
    spec.master_port = setup_.port;
    spec.restart_count = setup_.restart_count;
    spec.placement = setup_.placement;
    spec.omp_threads = cfg_.omp_threads;
    if (setup_.timers) {  // an earlier attempt's scopes went with its processes
      setup_.timers->table().clear();
      spec.timer_file = setup_.timers->path();
    }
    std::string attempt_log_dir;
    for (int lr = 0; lr < cfg_.nproc && !stopping_; ++lr) {
      SpawnSpec s;
      s.exe = cfg_.command.exe;
      s.args = cfg_.command.argv_for(lr);
      if (!cfg_.cpu_binding.empty()) s.cpus = cfg_.cpu_binding[static_cast<size_t>(lr)];
      Live live;
      live.local_rank = lr;
      std::vector<int> close_after;  // the child's ends of its log files and pipes
      try {
        if (cfg_.run_log_dir.empty()) {
          live.error_file = dir_.error_file(result_.attempt, lr);
          // No files to write: only --local_ranks_filter can say anything
          // here (a rank outside it: /dev/null, as torchrun).
          route_output(lr, RankLogPaths{}, s, live, close_after);
        } else {
          if (attempt_log_dir.empty()) {
            attempt_log_dir = make_attempt_log_dir(cfg_.run_log_dir, result_.attempt);
            open_duplicates(attempt_log_dir);
          }
          const RankLogPaths paths = make_rank_log_dir(attempt_log_dir, lr);
          live.error_file = paths.error_file;
          route_output(lr, paths, s, live, close_after);
        }
        relay_stderr(lr, s, close_after);
        const std::string heartbeat = progress_.create_heartbeat(lr, dir_.heartbeat_file(result_.attempt, lr));
        warn_progress();
        if (spec.fr_dump_prefix.empty()) start_flight_recorder(spec, attempt_log_dir);
        s.env = worker_environment(cfg_.parent_env, spec, lr, live.error_file, heartbeat);
        live.start = Clock::now();
        const pid_t pid = group_.spawn(std::move(s), lr, lr == 0 && stdin_to_rank0_);
        progress_.started(lr, base_rank_ + lr, pid);
        for (int fd : close_after) ::close(fd);
        live_[pid] = live;
        started_.push_back(pid);
      } catch (const SpawnError& e) {
        for (int fd : close_after) ::close(fd);
        spawn_failed(lr, e);
        return;
      } catch (const std::runtime_error& e) {  // a log directory, file or pipe could not be made
        for (int fd : close_after) ::close(fd);
        spawn_failed(lr, SpawnError(e.what(), 0, true));
        return;
      }
      // Starting thousands of workers takes a while: signals and early
      // failures are handled as they come, not after the last spawn.
      handle_events(0);
    }
  }

  // flight_recorder.h: the attempt's dumps beside its error files (the run
  // directory, flat, or the attempt's log directory); under a parent's
  // prefix, what is there already is noted so that only this attempt's count.
  void start_flight_recorder(GroupSpec& spec, const std::string& attempt_log_dir) {
    spec.fr_dump_prefix = attempt_log_dir.empty()
                              ? dir_.path() + "/attempt_" + std::to_string(result_.attempt) + ".nccl_trace_rank_"
                              : attempt_log_dir + "/nccl_trace_rank_";
    result_.fr_prefix = flight_recorder_prefix(cfg_.parent_env, spec.fr_dump_prefix);
    if (result_.fr_prefix != spec.fr_dump_prefix) fr_before_ = list_flight_recorder_files(result_.fr_prefix);
  }

  // --event_log_handler console: START for each worker, once all are started (as torchrun).
  void record_starts() {
    if (cfg_.opts.event_log_handler != "console") return;
    for (size_t lr = 0; lr < started_.size(); ++lr) {
      StatusEvent e = worker_event(cfg_, "START", result_, static_cast<int>(lr), started_[lr]);
      log_ << format_status_event(e);
    }
    log_ << std::flush;
  }

  // --duplicate_std{out,err}_filters: <attempt>/filtered_std{out,err}.log,
  // fed by the tee, made only when some rank's stream is tee'd to the console.
  void open_duplicates(const std::string& attempt_log_dir) {
    const LogOptions& logs = cfg_.opts.logs;
    auto open = [&](int bit, int console_fd, const std::vector<std::string>& filters, const char* name) {
      if (filters.empty() || !tees_to_console(logs, cfg_.nproc, bit)) return;
      if (!tee_) tee_.emplace();
      const std::string path = attempt_log_dir + "/" + name;
      tee_->duplicate(console_fd, open_log_file(path), path, filters);
    };
    open(kStdOut, 1, logs.dup_stdout_filters, "filtered_stdout.log");
    open(kStdErr, 2, logs.dup_stderr_filters, "filtered_stderr.log");
  }

  // Points the worker's stdout and stderr where the log options say.
  void route_output(int lr, const RankLogPaths& paths, SpawnSpec& s, Live& live, std::vector<int>& close_after) {
    const OutputPlan plan = plan_output(cfg_.opts.logs, lr);
    auto route = [&](StreamTarget t, const std::string& path, int console_fd, std::string& log_path) -> int {
      switch (t) {
        case StreamTarget::Console:
          return -1;
        case StreamTarget::Null:
          if (devnull_w_ < 0) devnull_w_ = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
          if (devnull_w_ < 0) throw std::runtime_error(std::string("cannot open /dev/null: ") + std::strerror(errno));
          return devnull_w_;
        case StreamTarget::File: {
          log_path = path;
          const int fd = open_log_file(path);
          close_after.push_back(fd);
          return fd;
        }
        case StreamTarget::Tee: {
          log_path = path;
          if (!tee_) tee_.emplace();
          const int rank = base_rank_ + lr;
          const int fd = tee_->add(open_log_file(path), path, console_fd,
                                   expand_prefix(cfg_.opts.logs.prefix_template, cfg_.opts.role, rank, lr),
                                   tee_observer(lr, console_fd));
          close_after.push_back(fd);
          return fd;
        }
      }
      return -1;
    };
    s.stdout_fd = route(plan.out, paths.stdout_log, 1, live.stdout_log);
    s.stderr_fd = route(plan.err, paths.stderr_log, 2, live.stderr_log);
  }

  void warn_tee() {
    const std::string w = tee_->take_warning();
    if (!w.empty()) log_ << w << std::endl;
  }

  // Stderr tails (stderr_relay.h, output_tail.h): a worker's stderr that
  // goes to the console or nowhere passes through the relay; a tee'd one is
  // seen by the tee; one redirected to its file is read from the file's end.
  void relay_stderr(int lr, SpawnSpec& s, std::vector<int>& close_after) {
    const StreamTarget t = plan_output(cfg_.opts.logs, lr).err;
    if (t != StreamTarget::Console && t != StreamTarget::Null) return;
    // Output is progress for --stall_timeout, here and in tee_observer's.
    if (!relay_)
      relay_.emplace([this](int rank, const char* data, size_t n) {
        stderr_tails_[static_cast<size_t>(rank)].append(data, n);
        progress_.note_output(rank);
      });
    const int fd = relay_->add(lr, t == StreamTarget::Console ? 2 : -1);
    const std::string w = relay_->take_warning();
    if (!w.empty()) log_ << w << std::endl;
    if (fd < 0) return;  // it keeps what it had: the console itself, or /dev/null
    s.stderr_fd = fd;
    close_after.push_back(fd);
  }

  OutputTee::Observer tee_observer(int lr, int console_fd) {
    if (console_fd != 2) {  // stdout: only progress
      if (!progress_.watching()) return {};
      return [this, lr](const char*, size_t) { progress_.note_output(lr); };
    }
    return [this, lr](const char* data, size_t n) {
      stderr_tails_[static_cast<size_t>(lr)].append(data, n);
      progress_.note_output(lr);
    };
  }

  // Every byte is read (the groups are gone): a failure without an error
  // file message gets one from the end of its stderr (stderr_failure.h).
  void explain_failures() {
    for (WorkerExit& w : result_.exits) {
      if (!w.failed() || !w.spawn_error.empty() || (w.error && !w.error->message.empty())) continue;
      const OutputTail& tail = stderr_tails_[static_cast<size_t>(w.local_rank)];
      const std::string text = !tail.empty() ? tail.text() : w.stderr_log.empty() ? "" : read_file_tail(w.stderr_log);
      if (auto f = failure_from_stderr(text)) {
        w.stderr_message = f->message;
        w.stderr_traceback = f->traceback;
      }
    }
  }

  void spawn_failed(int lr, const SpawnError& e) {
    WorkerExit w;
    w.local_rank = lr;
    w.rank = base_rank_ + lr;
    w.code = e.shell_code();
    w.time = std::chrono::system_clock::now();
    if (e.fork_failed) {
      w.spawn_error = "cannot start worker local_rank " + std::to_string(lr) + ": " + e.what() + "; " +
                      std::to_string(lr) + " of " + std::to_string(cfg_.nproc) + " workers had started";
      const std::string limits = process_limit_text(e.errno_value);
      if (!limits.empty())
        w.spawn_error += "; " + limits + ": give --nproc_per_node " + std::to_string(std::max(1, lr)) +
                         " or less, or raise the limit";
    } else {
      w.spawn_error = "cannot execute " + cfg_.command.exe + ": " + e.what();
    }
    result_.exits.push_back(w);
    result_.spawn_failed = true;
    spawn_failure_ = w;
    failure_seen_ = true;
    tell_failure(w);
    begin_stop(SIGTERM);
  }

  // --stall_timeout: the straggler is the root cause (exit code 124); the
  // group is stopped like a failed one, so --max_restarts applies.
  void on_stall(const StallVerdict& v) {
    log_ << "ddp-launch: " << v.message << "; stopping the group" << std::endl;
    dump_all_stacks("stalled");
    stall_ = v;
    failure_seen_ = true;
    WorkerExit told = stalled_exit();
    told.spawn_error = "it stalled (no progress for " + std::to_string(static_cast<long long>(v.idle_s)) + " s)";
    tell_failure(told);
    begin_stop(SIGTERM);
  }

  // The straggler's exit (once reaped) marked as stalled.
  WorkerExit stalled_exit() const {
    WorkerExit w;
    w.pid = stall_->straggler.pid;
    w.rank = stall_->straggler.rank;
    w.local_rank = stall_->straggler.local_rank;
    w.time = std::chrono::system_clock::now();
    for (const WorkerExit& e : result_.exits)
      if (e.pid == w.pid) w = e;
    w.stalled = stall_->message;
    return w;
  }

  void warn_progress() {
    const std::string w = progress_.take_warning();
    if (!w.empty()) log_ << w << std::endl;
  }

  void begin_stop(int sig) {
    group_.signal_all(sig);
    if (!stopping_) {
      stopping_ = true;
      deadline_ = Clock::now() + seconds(cfg_.opts.shutdown_timeout_s);
    }
  }

  void kill_all() {
    group_.signal_all(SIGKILL);
    if (!killed_) {
      killed_ = true;
      deadline_ = Clock::now() + seconds(kAfterKillWaitS);
    }
  }

  // One poll on the signalfd; the grace period is its timeout. Returns false
  // when the attempt must stop waiting for its groups.
  bool wait_for_event() {
    int timeout_ms = -1;
    if (stopping_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<long long>(0, left));
    }
    if (handle_events(timeout_ms)) return true;
    if (!killed_) {  // grace period over
      dump_all_stacks("shutdown_timeout: still running " + seconds_text(cfg_.opts.shutdown_timeout_s) +
                      " s after the teardown signal, before SIGKILL");
      kill_all();
      return true;
    }
    give_up_on_groups();
    return false;
  }

  // kAfterKillWaitS after SIGKILL: what is still in the groups is named
  // (state and wait channel from /proc) and left behind. The watchdog is
  // told to forget those groups too (it would wait for them at exit), and
  // their shared-memory names are removed as if they had ended.
  void give_up_on_groups() {
    std::vector<std::pair<pid_t, int>> groups;
    std::string ids;
    for (pid_t g : group_.groups()) {
      const auto at = std::find(started_.begin(), started_.end(), g);
      groups.push_back({g, static_cast<int>(at - started_.begin())});
      ids += (ids.empty() ? "" : " ") + std::to_string(g);
    }
    result_.unkillable = find_unkillable("/proc", groups, base_rank_);
    for (const UnkillableProcess& u : result_.unkillable) log_ << "ddp-launch: " << format_unkillable(u) << std::endl;
    if (result_.unkillable.empty())  // gone between the last reap and now, or out of our sight
      log_ << "ddp-launch: warning: process group(s) " << ids << " still have processes " << kAfterKillWaitS
           << " s after SIGKILL; going on without them" << std::endl;
    std::set<pid_t> leaders;
    for (const auto& g : groups) {
      watchdog_.remove_group(g.first);
      leaders.insert(g.first);
    }
    remove_worker_segments(leaders);
  }

  // Waits up to timeout_ms (-1: forever) for signals, children or tee'd
  // output. Returns false when the time ran out with nothing to do.
  bool handle_events(int timeout_ms) {
    polls_.assign(1, pollfd{signals_.fd(), POLLIN, 0});
    const bool agent = setup_.agent && !setup_.agent->gone();
    if (agent) polls_.push_back(pollfd{setup_.agent->fd(), POLLIN, 0});
    if (tee_)
      for (int fd : tee_->fds()) polls_.push_back(pollfd{fd, POLLIN, 0});
    const size_t relay_at = polls_.size();
    if (relay_)
      for (int fd : relay_->fds()) polls_.push_back(pollfd{fd, POLLIN, 0});
    const size_t relay_n = polls_.size() - relay_at;
    // c10d: the helper's next ping may come before timeout_ms; a poll that
    // ends for it is not the caller's time running out.
    bool ping_first = false;
    int wait_ms = timeout_ms;
    if (agent && (wait_ms < 0 || setup_.agent->ms_to_ping() < wait_ms)) {
      wait_ms = setup_.agent->ms_to_ping();
      ping_first = true;
    }
    // --stall_timeout: the next look at the workers' progress, likewise.
    bool progress_first = false;
    if (!stopping_ && progress_.ms_to_check() >= 0 && (wait_ms < 0 || progress_.ms_to_check() < wait_ms)) {
      wait_ms = progress_.ms_to_check();
      progress_first = true;
    }
    // torchrun's file timer: its pipe, and its nearest expiry as a timeout.
    const int timer_at = setup_.timers ? static_cast<int>(polls_.size()) : -1;
    bool timer_first = false;
    if (setup_.timers) {
      polls_.push_back(pollfd{setup_.timers->fd(), POLLIN, 0});
      const int ms = setup_.timers->ms_to_next_expiry(wall_seconds());
      if (ms >= 0 && (wait_ms < 0 || ms < wait_ms)) {
        wait_ms = ms;
        timer_first = true;
      }
    }
    int r = ::poll(polls_.data(), polls_.size(), wait_ms);
    if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
    if (agent) setup_.agent->ping_if_due();
    if (timer_at >= 0) serve_timers(r > 0 ? polls_[static_cast<size_t>(timer_at)].revents : 0);
    // Not while a signal waits: a worker's exit reaped below comes first
    // (the look is due again at once).
    if (!stopping_ && (r <= 0 || polls_[0].revents == 0))
      if (std::optional<StallVerdict> v = progress_.check()) on_stall(*v);
    if (r == 0) return ping_first || progress_first || timer_first;
    if (agent && polls_[1].revents != 0)
      for (const RdzvEvent& e : setup_.agent->read()) on_rdzv(e);
    if (tee_) {
      tee_->pump();
      warn_tee();
    }
    if (relay_) relay_->pump(polls_.data() + relay_at, relay_n);
    // Only on a signal: reap() signals every group to see which are empty,
    // which chatty tee'd output must not cost each time.
    if (polls_[0].revents == 0) return true;
    for (int sig : signals_.drain()) {
      if (!SignalChannel::is_forwarded(sig)) continue;  // SIGCHLD: reaped below
      if (signals_.is_dump_request(sig)) {
        dump_all_stacks(signal_name(sig) + ": a live dump, the job goes on");
        continue;
      }
      on_signal(sig);
    }
    reap();
    return true;
  }

  // c10d: a reason from the rendezvous to stop this node's workers. A local
  // failure seen first stays the root cause; the reason is kept either way.
  void on_rdzv(const RdzvEvent& e) {
    if (e.kind != RdzvEvent::Restart && e.kind != RdzvEvent::Abort && e.kind != RdzvEvent::Error) return;
    if (!result_.rdzv_stop.empty()) return;
    result_.rdzv_stop = e.text;
    result_.rdzv_counted = e.kind != RdzvEvent::Restart || e.counted;
    result_.rdzv_abort = e.kind != RdzvEvent::Restart;
    if (!stopping_) {
      log_ << "ddp-launch: stopping this node's workers: " << e.text << std::endl;
      begin_stop(SIGTERM);
    }
  }

  // c10d: the other nodes stop their workers as soon as this node's fail.
  void tell_failure(const WorkerExit& w) {
    if (!setup_.agent || told_failure_ || !result_.rdzv_stop.empty()) return;
    told_failure_ = true;
    std::string what = !w.spawn_error.empty() ? w.spawn_error
                       : w.expired_scope      ? format_expired_scope(*w.expired_scope)
                                              : w.status_text();
    setup_.agent->send("fail rank " + std::to_string(w.rank) + " (local_rank " + std::to_string(w.local_rank) +
                       (w.pid > 0 ? ", pid " + std::to_string(w.pid) : "") + ") on " + setup_.node + " failed: " + what);
  }

  void on_signal(int sig) {
    if (sig == SIGQUIT) dump_all_stacks("SIGQUIT: before forwarding it");  // Ctrl-\ asks where the ranks are
    const bool second_int = sig == SIGINT && saw_int_;
    if (sig == SIGINT) saw_int_ = true;
    if (failure_seen_ || group_.running_workers() == 0) {
      // A failure is already being torn down, or every worker is done and
      // only leftovers are being stopped: the signal ends the job (no
      // restart) but does not become its cause or its exit code.
      if (!result_.signal_during_teardown) result_.signal_during_teardown = sig;
    } else if (!result_.launcher_signal) {
      result_.launcher_signal = sig;
    }
    if (second_int) kill_all();  // a second Ctrl-C means now
    else begin_stop(sig);        // forwards sig to every group and starts the grace period
  }

  // Someone killed the watchdog (`pkill -f` of an older launcher's command
  // line, a kill of the wrong pid): without one, a SIGKILL of the launcher
  // would leave its workers' children and run directory behind. A new one
  // learns the groups alive now; said once per death, as a warning.
  void replace_watchdog(int status) {
    const pid_t old = watchdog_.pid();
    const std::string how = WIFSIGNALED(status) ? "died of " + signal_name(WTERMSIG(status))
                                                : "exited with code " + std::to_string(WEXITSTATUS(status));
    log_ << "ddp-launch: warning: the launcher's watchdog (pid " << old << ") " << how;
    try {
      watchdog_.replace();
      for (pid_t g : group_.groups()) watchdog_.add_group(g);
      log_ << "; started a new one (pid " << watchdog_.pid()
           << "), which cleans up after the workers if the launcher is killed" << std::endl;
    } catch (const SpawnError& e) {
      log_ << "; a new one could not be started (" << e.what()
           << "): if the launcher is now SIGKILLed, its workers' children and run directory are left behind"
           << std::endl;
    }
  }

  // Stacks of every worker still running (stack_dump.h) into the attempt's
  // --log_dir directory, else the run directory, which is then kept so the
  // files outlive the launcher. The summary goes to the log now and, as the
  // attempt's last dump, into the failure report. `why` starts with a word
  // that names the files: "SIGQUIT: ..." -> stacks.sigquit.<n>.rank_<r>.txt.
  void dump_all_stacks(const std::string& why) {
    std::vector<StackTarget> targets;
    for (const auto& [pid, live] : live_)
      targets.push_back(StackTarget{base_rank_ + live.local_rank, live.local_rank, pid, is_python_process(pid)});
    if (targets.empty()) return;
    std::sort(targets.begin(), targets.end(), [](const StackTarget& a, const StackTarget& b) { return a.rank < b.rank; });
    std::string dir = dir_.path(), tag;
    if (cfg_.run_log_dir.empty()) {
      dir_.keep();
      watchdog_.keep_run_dir();
      tag = "attempt_" + std::to_string(result_.attempt) + ".";
    } else {
      dir = cfg_.run_log_dir + "/attempt_" + std::to_string(result_.attempt);
    }
    for (char c : why.substr(0, why.find_first_of(" :;,")))
      tag += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
    tag += "." + std::to_string(++stack_dumps_);
    const auto path = cfg_.parent_env.find("PATH");
    const Clock::time_point start = Clock::now();
    const std::vector<RankStacks> stacks = dump_stacks(targets, dir, tag, kStackDumpTimeoutS,
                                                       find_stack_tools(path == cfg_.parent_env.end() ? "" : path->second));
    const std::string took = seconds_text(std::chrono::duration<double>(Clock::now() - start).count());
    const std::string ranks = std::to_string(stacks.size()) + (stacks.size() == 1 ? " rank" : " ranks");
    // With the runtime's heartbeats: where each rank is in the sequence of collectives.
    const std::string collectives = progress_.collective_summary();
    const std::string summary = format_stack_summary(stacks) + (collectives.empty() ? "" : "  " + collectives + "\n");
    log_ << "ddp-launch: stacks of " << ranks << " (" << why << ") in " << took << " s:\n" << summary << std::flush;
    result_.stacks = "Stacks (" + why + "; " + ranks + ", " + took + " s):\n" + summary;
  }

  static std::string seconds_text(double s) {
    std::ostringstream o;
    o.precision(s < 10 ? 2 : 3);
    o << s;
    return o.str();
  }

  // torchrun's file timer (file_timer_server.h): the pipe's requests, then
  // the scopes due. Each expiry sends its scope's signal; the first while
  // the group runs ends the attempt as a failure whose root cause is that
  // rank (exit 124); later ones, during the teardown, only send theirs, as
  // torchrun's watchdog would.
  void serve_timers(short revents) {
    FileTimerServer& timers = *setup_.timers;
    const double now = wall_seconds();
    if (revents & POLLIN) {
      const std::string warning = timers.read(now, [&](pid_t pid) { return timer_rank_of(pid) >= 0; });
      if (!warning.empty()) log_ << warning << std::endl;
    }
    for (const ExpiredPid& e : timers.table().take_expired(now)) {
      const int lr = timer_rank_of(e.pid);
      if (lr < 0) continue;  // gone: nothing to signal, and its pid may be someone else's now
      const std::string who = "rank " + std::to_string(base_rank_ + lr) + " (local_rank " + std::to_string(lr) +
                              ", pid " + std::to_string(e.pid) + ")";
      if (!e.fired) {  // FileTimerServer too leaves it alone
        log_ << "ddp-launch: " << who << ": timer scope '" << e.scopes.front().scope_id
             << "' expired; it asked for no signal, so it is left running" << std::endl;
        continue;
      }
      ExpiredScope x;
      x.scope_id = e.fired->scope_id;
      x.pid = e.pid;
      x.signal = e.fired->signal;
      x.acquired_for_s = std::max(0.0, e.fired->expiration_time - e.fired->acquired_at);
      x.acquired_at = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(e.fired->acquired_at)));
      x.expired_at = std::chrono::system_clock::now();
      ::kill(e.pid, x.signal);
      if (stopping_) continue;
      log_ << "ddp-launch: " << who << ": " << format_expired_scope(x) << "; stopping the group" << std::endl;
      failure_seen_ = true;
      // The rank's exit carries the scope; it is reaped already when the
      // scope was a child's of a worker that had exited.
      bool reaped = false;
      for (WorkerExit& w : result_.exits)
        if (w.local_rank == lr && w.pid == started_[static_cast<size_t>(lr)]) {
          w.expired_scope = x;
          w.after_teardown = false;
          reaped = true;
        }
      if (!reaped) expired_[lr] = x;
      WorkerExit told;
      told.rank = base_rank_ + lr;
      told.local_rank = lr;
      told.pid = e.pid;
      told.expired_scope = x;
      tell_failure(told);
      begin_stop(SIGTERM);
    }
  }

  // The local rank whose process group `pid` is in (its worker or a child
  // of it), -1 when none of this attempt's live groups: only those get a
  // timer's signal, and a group the kernel has given a reused id never does.
  int timer_rank_of(pid_t pid) const {
    const pid_t pg = ::getpgid(pid);
    const std::vector<pid_t>& live = group_.groups();
    if (pg <= 0 || std::find(live.begin(), live.end(), pg) == live.end()) return -1;
    for (size_t lr = 0; lr < started_.size(); ++lr)
      if (started_[lr] == pg) return static_cast<int>(lr);
    return -1;
  }

  void reap() {
    const bool was_stopping = stopping_;
    for (const WorkerGroup::Event& e : group_.reap()) {
      if (setup_.timers && e.kind == WorkerGroup::Event::Exited) setup_.timers->table().drop_pid(e.pid);
      if (e.is_watchdog) replace_watchdog(e.status);
      if (!e.is_worker) continue;  // an orphaned descendant we adopted as subreaper
      auto it = live_.find(e.pid);
      if (it == live_.end()) continue;
      const int rank = base_rank_ + it->second.local_rank;
      if (e.kind == WorkerGroup::Event::Stopped) {
        log_ << "ddp-launch: rank " << rank << " (local_rank " << it->second.local_rank << ", pid " << e.pid
             << ") is stopped by " << signal_name(WSTOPSIG(e.status))
             << "; the job cannot go on until it continues (kill -CONT " << e.pid << ")" << std::endl;
        if (stopping_) ::kill(e.pid, SIGCONT);  // it must act on the teardown signal
        continue;
      }
      if (e.kind != WorkerGroup::Event::Exited) continue;
      progress_.exited(it->second.local_rank);
      WorkerExit w;
      w.pid = e.pid;
      w.local_rank = it->second.local_rank;
      w.rank = rank;
      w.signaled = WIFSIGNALED(e.status);
      w.code = w.signaled ? WTERMSIG(e.status) : WEXITSTATUS(e.status);
      w.time = std::chrono::system_clock::now();
      w.after_teardown = was_stopping;
      w.max_rss_kb = e.max_rss_kb;
      w.cpu_s = e.cpu_s;
      w.wall_s = std::chrono::duration<double>(Clock::now() - it->second.start).count();
      w.error_file = it->second.error_file;
      w.stdout_log = it->second.stdout_log;
      w.stderr_log = it->second.stderr_log;
      if (auto x = expired_.find(w.local_rank); x != expired_.end()) {  // its file-timer scope expired
        w.expired_scope = x->second;
        w.after_teardown = false;
        expired_.erase(x);
      }
      if (w.failed()) {
        w.error = read_error_file(w.error_file);
        if (w.error) w.error_time = mtime_of(w.error_file);
      }
      if (w.signaled && w.code == SIGKILL && !killed_) w.oom = oom_.explain_sigkill(w.pid, w.max_rss_kb);
      live_.erase(it);
      result_.exits.push_back(w);
      if (w.failed() && !stopping_) {
        failure_seen_ = true;
        tell_failure(w);
        begin_stop(SIGTERM);
      }
    }
  }

  const LaunchPlan& cfg_;
  RunDirectory& dir_;
  SignalChannel& signals_;
  Watchdog& watchdog_;
  WorkerGroup group_;
  AttemptSetup setup_;
  int base_rank_;
  bool told_failure_ = false;
  bool stdin_to_rank0_;
  std::ostream& log_;
  AttemptResult result_;
  std::map<pid_t, Live> live_;
  std::vector<pid_t> started_;    // by local rank
  std::optional<OutputTee> tee_;  // only when some stream is tee'd
  std::optional<StderrRelay> relay_;  // only when some stderr goes to the console or nowhere
  std::vector<OutputTail> stderr_tails_;  // by local rank, for explain_failures()
  std::vector<pollfd> polls_;
  int devnull_w_ = -1;            // for ranks outside --local_ranks_filter
  std::optional<WorkerExit> spawn_failure_;
  OomWatch oom_;                  // the OOM kill counter of the workers' cgroup before they start
  std::vector<DumpFile> fr_before_;  // flight recorder files under a parent's prefix before the attempt
  std::map<int, ExpiredScope> expired_;  // by local rank: a file-timer scope expired, its worker not yet reaped
  bool failure_seen_ = false;
  bool stopping_ = false;
  bool killed_ = false;
  bool saw_int_ = false;
  bool leftovers_termed_ = false;
  int stack_dumps_ = 0;  // dumps taken in this attempt (they name the files)
  Clock::time_point deadline_;
  ProgressWatch progress_;           // heartbeat pages; --stall_timeout's looks
  std::optional<StallVerdict> stall_;
};

}  // namespace

Supervisor::Supervisor(LaunchPlan cfg, std::ostream& log) : cfg_(std::move(cfg)), log_(log) {}

namespace {

// Each tee'd stream holds two fds in the launcher (pipe and file) for the
// whole attempt: raise the soft fd limit towards the hard one when the
// default 1024 would not do for that many workers.
void raise_fd_limit_for(const LaunchOptions& opts, int nproc) {
  int streams = 0;
  for (int lr = 0; lr < nproc; ++lr) {
    const OutputPlan p = plan_output(opts.logs, lr);
    streams += (p.out == StreamTarget::Tee) + (p.err == StreamTarget::Tee);
  }
  if (streams == 0) return;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  const rlim_t need = static_cast<rlim_t>(2 * streams + 64);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min(need, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
}

bool is_in(const std::string& path, const std::string& dir) { return path.rfind(dir + "/", 0) == 0; }

// Whether the failure report of these attempts prints the path of a file in
// `dir`: it prints error_file for each attempt's root cause that wrote one.
bool report_names_file_in(const std::vector<AttemptResult>& attempts, const std::string& dir) {
  for (const AttemptResult& a : attempts)
    if (a.root_cause && a.root_cause->error && is_in(a.root_cause->error_file, dir)) return true;
  return false;
}

// Whether the report lists flight recorder dumps in `dir` (flight_recorder.h).
bool reports_dumps_in(const std::vector<AttemptResult>& attempts, const std::string& dir) {
  for (const AttemptResult& a : attempts)
    for (const std::string& f : a.fr_dumps)
      if (is_in(f, dir)) return true;
  return false;
}

// The attempts without the error files in `dir` (removed at exit), so the
// summary never names a file that is gone.
std::vector<AttemptResult> without_files_in(std::vector<AttemptResult> attempts, const std::string& dir) {
  for (AttemptResult& a : attempts) {
    for (WorkerExit& w : a.exits)
      if (is_in(w.error_file, dir)) w.error.reset();
    if (a.root_cause && is_in(a.root_cause->error_file, dir)) a.root_cause->error.reset();
  }
  return attempts;
}

}  // namespace

namespace {

// c10d: rounds of rendezvous and attempts until the job ends on this node.
//  - every attempt starts with a round (node rank, world, the workers'
//    MASTER_ADDR:PORT and restart count come from it);
//  - a local failure is told to the rendezvous at once (Attempt), a reason
//    from it stops healthy workers; either way the round's reason decides:
//    a counted one with restarts left, or an uncounted one (a node waiting
//    to join), rejoins; no restarts left ends the job on every node (abort);
//  - workers that succeed wait at the exit barrier for the round's others.
struct ElasticRun {
  const LaunchPlan& cfg;
  RunDirectory& dir;
  SignalChannel& signals;
  Watchdog& watchdog;
  bool stdin_to_rank0;
  const std::string& host;
  std::ostream& log;
  std::vector<AttemptResult>& attempts;
  std::string error;  // the job ended here because the rendezvous failed
  int signal = 0;     // a launcher signal while waiting on the rendezvous
  FileTimerServer* timers = nullptr;  // torchrun's file timer, when served

  // Waits for the helper's next event of one of `kinds`, serving signals
  // meanwhile. nullopt when a signal ended the wait (`signal` says which).
  std::optional<RdzvEvent> await(RdzvAgent& agent, std::initializer_list<RdzvEvent::Kind> kinds) {
    while (true) {
      pollfd p[2] = {{signals.fd(), POLLIN, 0}, {agent.fd(), POLLIN, 0}};
      const int r = ::poll(p, agent.gone() ? 1 : 2, agent.gone() ? -1 : agent.ms_to_ping());
      if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));
      if (!agent.gone()) agent.ping_if_due();
      if (r <= 0) continue;
      if (p[0].revents != 0)
        for (int sig : signals.drain())
          if (SignalChannel::is_forwarded(sig) && !signals.is_dump_request(sig)) {  // no workers to dump
            signal = sig;
            return std::nullopt;
          }
      if (agent.gone()) {
        RdzvEvent e;
        e.text = "the rendezvous helper (ddp-rdzv) exited";
        return e;
      }
      if (p[1].revents == 0) continue;
      for (const RdzvEvent& e : agent.read())
        if (e.kind == RdzvEvent::Error || std::find(kinds.begin(), kinds.end(), e.kind) != kinds.end()) return e;
    }
  }

  void run() {
    RdzvAgent agent(cfg.opts, cfg.nproc, signals.original_mask());
    const int max_restarts = cfg.opts.max_restarts;
    for (int attempt = 0;; ++attempt) {
      log << "ddp-launch: joining the rendezvous at " << endpoint() << " (rdzv_id " << cfg.opts.run_id << ", "
          << nodes_text() << ")" << std::endl;
      agent.send("join");
      const std::optional<RdzvEvent> round = await(agent, {RdzvEvent::Round});
      if (!round) return;
      if (round->kind == RdzvEvent::Error) {
        error = round->text;
        return;
      }
      const NodePlacement& p = round->placement;
      AttemptSetup setup;
      setup.port = round->master_port;
      setup.restart_count = round->restart_count;
      setup.placement = p;
      setup.agent = &agent;
      setup.timers = timers;
      setup.node = "node n" + std::to_string(p.group_rank) + " (pid " + std::to_string(::getpid()) + ", host " +
                   host + ")";
      log << "ddp-launch: round " << round->round << ": this is node " << p.group_rank << " of "
          << p.group_world_size << ", ranks " << p.base_rank << ".." << p.base_rank + cfg.nproc - 1 << " of "
          << p.world_size << ", workers' store at " << p.master_addr << ":" << round->master_port
          << ", restart count " << round->restart_count << std::endl;
      Attempt a(cfg, dir, signals, watchdog, attempt, setup, stdin_to_rank0, log);
      attempts.push_back(a.run());
      AttemptResult& last = attempts.back();
      if (last.succeeded()) {
        agent.send("done");
        const auto fin = await(agent, {RdzvEvent::Finished});
        if (fin && !fin->text.empty())
          log << "ddp-launch: warning: this node's workers succeeded; the exit barrier ended early: " << fin->text
              << std::endl;
        return;
      }
      if (last.launcher_signal || last.signal_during_teardown) {
        const int sig = last.launcher_signal ? last.launcher_signal : last.signal_during_teardown;
        agent.send("abort the launcher of " + setup.node + " got " + signal_name(sig));
        await(agent, {RdzvEvent::Aborted});
        return;
      }
      // The round's reason: ours was sent at the failure (Attempt); the
      // answer may name another node's, which came first.
      std::string reason = last.rdzv_stop;
      if (last.rdzv_stop.empty() && a.told_failure()) {
        const auto answer = await(agent, {RdzvEvent::Restart, RdzvEvent::Abort});
        if (!answer) return;
        last.rdzv_counted = answer->kind != RdzvEvent::Restart || answer->counted;
        last.rdzv_abort = answer->kind != RdzvEvent::Restart;
        if (answer->kind == RdzvEvent::Error) error = answer->text;
        if (!last.root_cause) last.rdzv_stop = answer->text;
        reason = answer->text;
      }
      if (last.rdzv_abort) {
        if (error.empty() && !last.rdzv_stop.empty() && !last.root_cause) error = "the job was ended: " + last.rdzv_stop;
        return;
      }
      if (!last.unkillable.empty()) {  // a new round here would meet them holding GPUs and ports
        agent.send("abort " + reason + "; " + setup.node + " has workers that SIGKILL cannot end");
        await(agent, {RdzvEvent::Aborted});
        return;
      }
      if (last.spawn_failed || (last.rdzv_counted && round->restart_count >= max_restarts)) {
        agent.send("abort " + reason + "; " + setup.node + " has no restarts left (max_restarts " +
                   std::to_string(max_restarts) + ")");
        await(agent, {RdzvEvent::Aborted});
        return;
      }
      // The round's one reason (every node prints the same), whether it was
      // this node's failure or another's.
      log << "ddp-launch: round " << round->round << " ended: " << reason << "; "
          << (last.rdzv_counted ? "restart " + std::to_string(round->restart_count + 1) + " of " +
                                      std::to_string(max_restarts)
                                : "not counted as a restart")
          << "; rejoining the rendezvous" << std::endl;
    }
  }

  std::string endpoint() const {
    const RdzvOptions& r = cfg.opts.rdzv;
    return (r.host.find(':') != std::string::npos ? "[" + r.host + "]" : r.host) + ":" + std::to_string(r.port);
  }
  std::string nodes_text() const {
    const RdzvOptions& r = cfg.opts.rdzv;
    return r.min_nodes == r.max_nodes ? std::to_string(r.min_nodes) + " nodes"
                                      : std::to_string(r.min_nodes) + " to " + std::to_string(r.max_nodes) + " nodes";
  }
};

}  // namespace

int Supervisor::run() {
  const Clock::time_point started = Clock::now();
  // Adopt orphaned grandchildren so they are reaped here, not left as zombies.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  SignalChannel signals(cfg_.opts.signals_to_handle);
  RunDirectory dir;  // named, not yet created: the watchdog knows the name first
  std::optional<Watchdog> watchdog;
  try {
    watchdog.emplace(dir.path());
  } catch (const SpawnError& e) {
    const std::string limits = process_limit_text(e.errno_value);
    throw std::runtime_error(std::string("cannot start the launcher's watchdog process: ") + e.what() +
                             (limits.empty() ? "" : "; " + limits));
  }
  try {
    dir.create();
  } catch (const std::runtime_error&) {
    watchdog->keep_run_dir();  // the name may be another process's: never removed
    throw;
  }
  const bool stdin_to_rank0 = stdin_is_ours();
  const std::string host = hostname();
  if (!cfg_.run_log_dir.empty()) {
    log_ << "ddp-launch: worker logs and error files in " << cfg_.run_log_dir << std::endl;
    raise_fd_limit_for(cfg_.opts, cfg_.nproc);
  }
  ensure_fd_limit(5 * static_cast<size_t>(cfg_.nproc) + 64);  // a relayed stderr holds one fd per worker

  // TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file timer, one pipe for
  // every attempt (removed before the run directory is).
  std::optional<FileTimerServer> timers;
  if (cfg_.opts.file_timer)
    timers.emplace(cfg_.opts.file_timer_path.empty() ? dir.path() + "/" + kTimerPipeName : cfg_.opts.file_timer_path);

  std::string rdzv_error;  // c10d: the rendezvous failed (the job's end on this node)
  int rdzv_signal = 0;     // c10d: a signal while waiting on the rendezvous
  if (cfg_.opts.rdzv.elastic()) {
    ElasticRun run{cfg_, dir, signals, *watchdog, stdin_to_rank0, host, log_, attempts_, {}, 0};
    run.timers = timers ? &*timers : nullptr;
    run.run();
    rdzv_error = run.error;
    rdzv_signal = run.signal;
  } else {
    for (int attempt = 0;; ++attempt) {
      AttemptSetup setup;
      // 0 (--standalone, or port 0 given): a free port per attempt, as --standalone's.
      setup.port = cfg_.opts.master_port == 0 ? reserve_check_port(0) : cfg_.opts.master_port;
      setup.restart_count = attempt;
      setup.timers = timers ? &*timers : nullptr;
      attempts_.push_back(Attempt(cfg_, dir, signals, *watchdog, attempt, setup, stdin_to_rank0, log_).run());
      const AttemptResult& a = attempts_.back();
      if (a.succeeded()) break;
      if (!a.restartable() || attempt >= cfg_.opts.max_restarts) break;
      log_ << format_restart_line(a, cfg_.opts.max_restarts) << std::endl;
    }
  }

  RunTotals totals;
  totals.exit_code = attempts_.empty() ? 0 : attempts_.back().exit_code();
  if (!rdzv_error.empty() && totals.exit_code == 0) totals.exit_code = 1;
  if (rdzv_signal) totals.exit_code = 128 + rdzv_signal;
  totals.wall_s = std::chrono::duration<double>(Clock::now() - started).count();
  totals.host = host;
  totals.log_dir = cfg_.run_log_dir;
  if (cfg_.opts.event_log_handler == "console")
    log_ << final_events(cfg_, attempts_, rdzv_error, rdzv_signal, totals.wall_s);
  if (!attempts_.empty()) log_ << format_run_summary(attempts_, totals);
  const bool failed = totals.exit_code != 0;
  // The report prints these paths: they must outlive the launcher (the run
  // directory is otherwise removed at exit, by us and the watchdog). Only
  // then: a job that succeeded after a restart leaves nothing behind.
  const bool names_files = failed && report_names_file_in(attempts_, dir.path());
  const bool names_fr_dumps = failed && reports_dumps_in(attempts_, dir.path());
  // A stack dump without --log_dir wrote its files into the run directory
  // and kept it (Attempt::dump_all_stacks), whether the job failed or not.
  const bool has_stacks = dir.kept();
  const bool keep = names_files || names_fr_dumps || has_stacks;
  if (keep) {
    dir.keep();
    watchdog->keep_run_dir();
  }
  // Every group is gone: the watchdog may end now, while the report is
  // written, and is reaped when it goes out of scope.
  watchdog->finish();
  if (failed) log_ << format_failure_report(attempts_, host, cfg_.opts.max_restarts);
  if (!rdzv_error.empty()) log_ << "ddp-launch: error: " << rdzv_error << "\n";
  if (rdzv_signal) log_ << "ddp-launch: stopped by " << signal_name(rdzv_signal) << " while in the rendezvous\n";
  if (keep) {
    std::vector<std::string> kept;
    if (names_files) kept.push_back("error files");
    if (names_fr_dumps) kept.push_back("flight recorder dumps");
    if (has_stacks) kept.push_back("stack dumps");
    std::string what;
    for (size_t i = 0; i < kept.size(); ++i)
      what += (i == 0 ? "" : i + 1 == kept.size() ? " and " : ", ") + kept[i];
    log_ << "ddp-launch: the " << what << " above are kept in " << dir.path() << " (remove it when done)\n";
  }
  if (!cfg_.opts.summary_json.empty()) {
    try {
      // A device, FIFO or symlink (/dev/stdout) is written through, never replaced.
      ddp::write_output_file(cfg_.opts.summary_json,
                             format_summary_json(keep ? attempts_ : without_files_in(attempts_, dir.path()), totals));
    } catch (const ddp::AtomicWriteError& e) {
      log_ << "ddp-launch: warning: --summary_json not written: " << e.what() << "\n";
    }
  }
  log_ << std::flush;
  return totals.exit_code;
}

}  // namespace ddp::launcher
