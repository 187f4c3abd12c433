#include "ddp/launcher/elastic/rdzv_agent.h"

#include "ddp/launcher/base/own_programs.h"
#include "ddp/launcher/process/spawn.h"

#include "ddp/common/fd_io.h"
#include "ddp/common/untrusted_text.h"
#include "ddp/rdzv/agent_lines.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sstream>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ddp::launcher {

RdzvEvent parse_rdzv_line(const std::string& line) {
  using rdzv::lines::Answer;
  const rdzv::lines::AnswerLine a = rdzv::lines::parse_answer(line);
  RdzvEvent e;
  // Store text (another node's reason, a client of the store's protocol):
  // control bytes escaped here, so no line prints them raw (issue 51 item 3).
  e.text = ddp::visible_text(a.text);
  e.counted = a.counted;
  switch (a.answer) {
    case Answer::Round: {
      e.kind = RdzvEvent::Round;
      e.round = a.round.round;
      e.restart_count = a.round.restart_count;
      NodePlacement& p = e.placement;
      p.group_rank = a.round.group_rank;
      p.group_world_size = a.round.group_world_size;
      p.base_rank = a.round.base_rank;
      p.world_size = a.round.world_size;
      p.master_addr = a.round.master_addr;
      e.master_port = a.round.master_port;
      e.replaced = ddp::visible_text(a.round.replaced);
      // A hot spare's takeover: its ranks return under this generation.
      e.generation = a.round.recovery_generation;
      e.used = a.round.recovery_used;
      return e;
    }
    case Answer::Restart: e.kind = RdzvEvent::Restart; return e;
    case Answer::Abort: e.kind = RdzvEvent::Abort; return e;
    case Answer::Aborted: e.kind = RdzvEvent::Aborted; return e;
    case Answer::Finished: e.kind = RdzvEvent::Finished; return e;
    case Answer::Error: e.kind = RdzvEvent::Error; return e;
    case Answer::JobSteps: e.kind = RdzvEvent::JobSteps; return e;
    case Answer::Recovery:
    case Answer::RecoveryRefused:
    case Answer::PeerRecovery:
      e.kind = a.answer == Answer::Recovery          ? RdzvEvent::Recovery
               : a.answer == Answer::RecoveryRefused ? RdzvEvent::RecoveryRefused
                                                     : RdzvEvent::PeerRecovery;
      e.generation = a.recovery.generation;
      e.used = a.recovery.used;
      e.used_up = a.recovery.used_up;
      e.rank = a.recovery.rank;
      return e;
    case Answer::Unexpected: break;
  }
  e.kind = RdzvEvent::Error;
  e.text = "the rendezvous helper said something unexpected: '" + ddp::visible_text(line) + "'";
  return e;
}

std::string rdzv_helper_path() { return program_beside_self("ddp-rdzv"); }

namespace {

std::string seconds_arg(double s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

}  // namespace

RdzvAgent::RdzvAgent(const LaunchOptions& o, int nproc, const sigset_t& child_mask) {
  const std::string exe = rdzv_helper_path();
  if (::access(exe.c_str(), X_OK) != 0)
    throw std::runtime_error("--rdzv_backend " + o.rdzv.backend + " needs " + exe +
                             " (built and installed with ddp-launch; put it beside ddp-launch), "
                             "or use static rendezvous: --nnodes N --node_rank R --master_addr HOST --master_port PORT");
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    throw std::runtime_error(std::string("pipe failed: ") + std::strerror(errno));
  }
  const RdzvOptions& r = o.rdzv;
  SpawnSpec s;
  s.exe = exe;
  s.args = {"--host=" + r.host,
            "--port=" + std::to_string(r.port),
            "--id=" + o.run_id,
            "--min=" + std::to_string(r.min_nodes),
            "--max=" + std::to_string(r.max_nodes),
            "--nproc=" + std::to_string(nproc),
            "--is_host=" + r.is_host,
            "--join_timeout=" + seconds_arg(r.join_timeout_s),
            "--last_call_timeout=" + seconds_arg(r.last_call_timeout_s),
            "--close_timeout=" + seconds_arg(r.close_timeout_s),
            "--read_timeout=" + seconds_arg(r.read_timeout_s),
            "--keep_alive_interval=" + seconds_arg(r.keep_alive_interval_s),
            "--keep_alive_max_attempt=" + std::to_string(r.keep_alive_max_attempt),
            "--hot_spares=" + std::to_string(r.hot_spares),
            // A lost node's place taken in the running round (a takeover):
            // only with in-place recovery, within the job's budget.
            std::string("--recovery=") + (o.recovery_in_place ? "in_place" : "restart"),
            "--max_restarts=" + std::to_string(o.max_restarts)};
  if (!r.local_addr.empty()) s.args.push_back("--local_addr=" + r.local_addr);
  exit_text_ = "the rendezvous helper (ddp-rdzv) exited";
  // c10d: if it hosted the store (--rdzv_endpoint is this node), every node
  // has lost the rendezvous with it.
  if (r.backend == "c10d")
    exit_text_ += "; if it hosted the rendezvous store at " +
                  (r.host.find(':') != std::string::npos ? "[" + r.host + "]" : r.host) + ":" + std::to_string(r.port) +
                  ", every node has lost the rendezvous: the c10d rendezvous host is a single point of failure, "
                  "--rdzv_backend etcd-v3 keeps the rendezvous in an etcd cluster that outlives any one node";
  if (r.backend == "etcd-v3") {
    s.args.push_back("--backend=etcd-v3");
    s.args.push_back("--endpoints=" + r.endpoints);
  }
  s.env = current_environment();
  s.child_mask = &child_mask;
  s.stdin_fd = in[0];
  s.stdout_fd = out[1];
  try {
    pid_ = spawn_worker(s);
  } catch (...) {
    for (int fd : {in[0], in[1], out[0], out[1]}) ::close(fd);
    throw;
  }
  ::close(in[0]);
  ::close(out[1]);
  to_ = in[1];
  from_ = out[0];
  // Non-blocking: a ping never waits for a helper that does not read.
  ::fcntl(to_, F_SETFL, ::fcntl(to_, F_GETFL) | O_NONBLOCK);
  ping_every_ = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(r.keep_alive_interval_s / 2));
  next_ping_ = std::chrono::steady_clock::now() + ping_every_;
}

RdzvAgent::~RdzvAgent() {
  if (to_ >= 0) ::close(to_);  // EOF: the helper exits (the store's host after its exit barrier)
  // The launcher reaps every child (subreaper, WorkerGroup::reap); only wait
  // here for the helper's pipe to close, at most a few seconds.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool closed = eof_;
  if (from_ >= 0) {
    char buf[256];
    while (!closed && std::chrono::steady_clock::now() < until) {
      if (ddp::fd::read_some(from_, buf, sizeof(buf)) <= 0) closed = true;
    }
    ::close(from_);
  }
  if (pid_ > 0) {
    int status;
    // Its pipe closes a moment before it can be reaped: once the pipe is
    // closed, wait for its exit (a pidfd, bounded by the same 5 s), so no
    // zombie is left to a PID 1 that may not reap.
    if (::waitpid(pid_, &status, WNOHANG) == 0 && closed) {
      const int pfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
      if (pfd >= 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
        pollfd p{pfd, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
        ::close(pfd);
      }
      ::waitpid(pid_, &status, WNOHANG);
    }
  }
}

void RdzvAgent::send(const std::string& line) {
  std::string l = line;
  for (char& c : l)
    if (c == '\n' || c == '\r') c = ' ';
  l += '\n';
  // The pipe is full: a command waits for room. The helper is gone: its
  // EOF on fd() says so.
  ddp::fd::write_all(to_, l, ddp::fd::WhenFull::wait);
}

int RdzvAgent::ms_to_ping() const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_ping_ - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<long long>(0, left.count() + 1));
}

void RdzvAgent::ping_if_due() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_ping_ || to_ < 0) return;
  next_ping_ = now + ping_every_;
  // A pipe write of at most PIPE_BUF is whole or not at all.
  static const std::string ping = rdzv::lines::format_command(rdzv::lines::Command::Ping) + "\n";
  ddp::fd::retry_eintr([&] { return ::write(to_, ping.data(), ping.size()); });
}

std::vector<RdzvEvent> RdzvAgent::read() {
  std::vector<RdzvEvent> events;
  char buf[4096];
  const ssize_t n = ::read(from_, buf, sizeof(buf));
  if (n > 0) pending_.append(buf, static_cast<std::size_t>(n));
  for (auto nl = pending_.find('\n'); nl != std::string::npos; nl = pending_.find('\n')) {
    events.push_back(parse_rdzv_line(pending_.substr(0, nl)));
    pending_.erase(0, nl + 1);
  }
  if (n == 0 && !eof_) {
    eof_ = true;
    RdzvEvent e;
    e.kind = RdzvEvent::Error;
    e.text = exit_text_;
    events.push_back(e);
  }
  return events;
}

}  // namespace ddp::launcher
