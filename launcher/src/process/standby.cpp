#include "ddp/launcher/process/standby.h"

#include "ddp/common/duration_text.h"
#include "ddp/common/fd_io.h"
#include "ddp/common/heartbeat.h"
#include "ddp/common/standby_protocol.h"
#include "ddp/common/untrusted_text.h"
#include "ddp/launcher/process/watchdog.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace ddp::launcher {

namespace sb = ddp::standby;

namespace {

// How long adopt() waits for the standby's "ok": it installs a few fds and
// an environment, microseconds; this is for a standby that hangs.
constexpr int kConfirmTimeoutMs = 2000;

bool identity(const std::string& k) {
  static const char* const names[] = {"RANK",        "LOCAL_RANK",      "WORLD_SIZE",      "LOCAL_WORLD_SIZE",
                                      "GROUP_RANK",  "GROUP_WORLD_SIZE", "ROLE_RANK",       "ROLE_NAME",
                                      "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",     "DDP_RECOVERY_GENERATION"};
  for (const char* n : names)
    if (k == n) return true;
  return k.rfind("TORCHELASTIC_", 0) == 0 || k == Heartbeat::kEnvVar;
}

}  // namespace

EnvMap standby_environment(const EnvMap& rank_env) {
  EnvMap out;
  for (const auto& [k, v] : rank_env)
    if (!identity(k)) out[k] = v;
  return out;
}

Standby::Standby(const sigset_t& child_mask, Watchdog* watchdog, int ready_wait_ms)
    : child_mask_(child_mask), watchdog_(watchdog), ready_wait_ms_(ready_wait_ms) {}

Standby::~Standby() { stop(); }

void Standby::start(const SpawnSpec& rank_spec) {
  stop();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    throw SpawnError(std::string("cannot make the standby's socket: ") + std::strerror(errno), errno, true);
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  SpawnSpec s;
  s.exe = rank_spec.exe;
  s.args = rank_spec.args;
  s.env = standby_environment(rank_spec.env);
  s.env[sb::kFdEnvVar] = std::to_string(sv[1]);
  s.child_mask = &child_mask_;
  s.stdin_fd = s.stdout_fd = s.stderr_fd = null;  // -1 (no /dev/null): the launcher's, harmless
  s.inherit_fds = {sv[1]};
  pid_t pid = 0;
  try {
    pid = spawn_worker(s);
  } catch (...) {
    ::close(sv[0]);
    ::close(sv[1]);
    if (null >= 0) ::close(null);
    throw;
  }
  ::close(sv[1]);
  if (null >= 0) ::close(null);
  pid_ = pid;
  sock_ = sv[0];
  ready_ = false;
  exe_ = s.exe;
  args_ = s.args;
  if (watchdog_) watchdog_->add_group(pid_);
}

bool Standby::ready(int wait_ms) {
  if (pid_ == 0) return false;
  if (ready_) return true;
  pollfd p{sock_, POLLIN, 0};
  if (wait_ms > 0 && ddp::fd::retry_eintr([&] { return ::poll(&p, 1, wait_ms); }) <= 0) return false;
  char buf[64];
  const ssize_t n = ddp::fd::retry_eintr([&] { return ::recv(sock_, buf, sizeof buf, MSG_DONTWAIT); });
  if (n == 0) ended_ = true;  // EOF: it is gone (died() follows)
  if (n <= 0) return false;
  ready_ = std::string(buf, static_cast<size_t>(n)) == "ready " + std::to_string(sb::kProtocol) + "\n";
  return ready_;
}

pid_t Standby::adopt(const SpawnSpec& spec, std::string& why) {
  if (pid_ == 0) {
    why = "no standby";
    return 0;
  }
  const pid_t pid = pid_;
  auto failed = [&](const std::string& text) {
    why = text;
    stop();
    return pid_t{0};
  };
  // Each refusal leaves it running: another rank may fit (an argv that
  // differs by local rank), and stop() ends it with the attempt.
  // The arguments' values may differ (--local_rank=N), their number not:
  // the standby's main gets its own argc.
  if (spec.exe != exe_ || spec.args.size() != args_.size()) {
    why = "its program or number of arguments differ from the rank's";
    return 0;
  }
  if (!spec.cpus.empty()) {
    why = "the rank is bound to CPUs (--numa_binding)";
    return 0;
  }
  if (spec.new_session) {  // a group leader cannot start a session
    why = "the rank keeps the launcher's terminal";
    return 0;
  }
  // Still loading: it is ahead of a fresh start all the same (which would
  // compete with it for the CPUs), so wait for it, within bounds.
  if (!ready(ready_wait_ms_))
    return failed(ended_ ? "it ended before it was ready"
                         : "it was not ready within " + ddp::seconds_text(ready_wait_ms_ / 1000.0));
  // -1: the launcher's own, as a spawned worker would inherit it.
  std::vector<int> fds = {spec.stdin_fd >= 0 ? spec.stdin_fd : 0, spec.stdout_fd >= 0 ? spec.stdout_fd : 1,
                          spec.stderr_fd >= 0 ? spec.stderr_fd : 2};
  std::string msg = "adopt " + std::to_string(sb::kProtocol) + "\nfds 0 1 2";
  for (int fd : spec.inherit_fds) {
    fds.push_back(fd);
    msg += " " + std::to_string(fd);
  }
  msg += "\nargv " + std::to_string(spec.args.size() + 1) + "\n";
  msg.append(spec.exe).push_back('\0');
  for (const std::string& arg : spec.args) msg.append(arg).push_back('\0');
  for (const auto& [k, v] : spec.env) {
    msg += k + "=" + v;
    msg.push_back('\0');
  }
  if (fds.size() > static_cast<size_t>(sb::kMaxFds)) return failed("more fds than a standby takes");
  if (msg.size() > sb::kMaxMessage) return failed("the environment is too large for one message");
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()), 0);
  iovec iov{msg.data(), msg.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control.data();
  mh.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  if (ddp::fd::retry_eintr([&] { return ::sendmsg(sock_, &mh, MSG_NOSIGNAL); }) < 0)
    return failed(std::string("sending it the rank: ") + std::strerror(errno));
  pollfd p{sock_, POLLIN, 0};
  if (ddp::fd::retry_eintr([&] { return ::poll(&p, 1, kConfirmTimeoutMs); }) <= 0)
    return failed("it did not confirm within " + std::to_string(kConfirmTimeoutMs / 1000) + " s");
  char buf[512];
  const ssize_t n = ddp::fd::retry_eintr([&] { return ::recv(sock_, buf, sizeof buf, MSG_DONTWAIT); });
  const std::string reply = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  if (reply != "ok\n")
    return failed(reply.rfind("error ", 0) == 0 ? ddp::visible_text(reply.substr(6, reply.size() - 7))
                                                : "it ended before it confirmed");
  forget();  // the worker's now: WorkerGroup has its group
  return pid;
}

bool Standby::died(pid_t pid) {
  if (pid_ == 0 || pid != pid_) return false;
  if (watchdog_) watchdog_->remove_group(pid_);
  forget();
  return true;
}

void Standby::stop() {
  if (pid_ == 0) return;
  ::kill(-pid_, SIGKILL);  // its group: anything it started too
  int status;
  ddp::fd::retry_eintr([&] { return ::waitpid(pid_, &status, 0); });  // ECHILD: someone reaped it already
  if (watchdog_) watchdog_->remove_group(pid_);
  forget();
}

void Standby::forget() {
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
  pid_ = 0;
  ready_ = ended_ = false;
}

}  // namespace ddp::launcher
