// The standby process (process/standby.h) and the runtime's hook it waits in
// (worker/src/standby.cpp), with real processes but without the launcher:
// ddp-standby-test-worker has the hook compiled in and a main that says what
// it got. ~1 s in all.
#include "ddp/common/standby_protocol.h"
#include "ddp/launcher/process/standby.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace ddp::launcher;

namespace {

const char* const kWorker = DDP_STANDBY_TEST_WORKER;

sigset_t current_mask() {
  sigset_t m;
  ::sigprocmask(SIG_SETMASK, nullptr, &m);
  return m;
}

// A rank's spec for the test worker.
SpawnSpec rank_spec(const std::vector<std::string>& args, const std::string& foo) {
  SpawnSpec s;
  s.exe = kWorker;
  s.args = args;
  s.env = {{"PATH", "/usr/bin:/bin"}, {"FOO", foo}, {"RANK", "3"}, {"MASTER_PORT", "1234"}};
  return s;
}

// Everything a pipe's read end gets until every writer is gone.
std::string drain(int fd) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

int exit_code(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A pipe: p[0] read, p[1] write (close-on-exec: only what a spawn installs reaches a child).
struct Pipe {
  int p[2] = {-1, -1};
  int& r = p[0];
  int& w = p[1];
  Pipe() { REQUIRE(::pipe2(p, O_CLOEXEC) == 0); }
};

// The test worker started by hand with DDP_STANDBY_FD, its "ready" read.
struct RawStandby {
  pid_t pid = 0;
  int sock = -1;
  Pipe out;
  RawStandby() {
    int sv[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    SpawnSpec s;
    s.exe = kWorker;
    s.env = {{ddp::standby::kFdEnvVar, std::to_string(sv[1])}};
    s.stdout_fd = out.w;
    s.inherit_fds = {sv[1]};
    pid = spawn_worker(s);
    ::close(sv[1]);
    ::close(out.w);
    sock = sv[0];
    char buf[32];
    const ssize_t n = ::recv(sock, buf, sizeof buf, 0);
    REQUIRE(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0) == "ready 1\n");
  }
};

}  // namespace

TEST_CASE("standby: a rank's environment without its identity") {
  const EnvMap env = standby_environment({{"PATH", "/bin"}, {"OMP_NUM_THREADS", "2"}, {"RANK", "3"}, {"LOCAL_RANK", "1"},
                                          {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                                          {"TORCHELASTIC_ERROR_FILE", "/e"}, {"DDP_HEARTBEAT_FILE", "/proc/self/fd/9"},
                                          {"GROUP_RANK", "0"}, {"ROLE_RANK", "3"}});
  CHECK(env == EnvMap{{"PATH", "/bin"}, {"OMP_NUM_THREADS", "2"}});
}

TEST_CASE("standby: adopted, its main runs with the rank's fds at their numbers, the rank's environment and its argv") {
  const sigset_t mask = current_mask();
  Standby sb(mask, nullptr);
  sb.start(rank_spec({"a", "b"}, "old"));
  REQUIRE(sb.pid() > 0);
  Pipe out, err, extra;
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  // The extra fd at a number of its own, as a heartbeat page's.
  const int at = ::fcntl(extra.w, F_DUPFD_CLOEXEC, 40);
  ::close(extra.w);
  // The arguments' values are the rank's: one as long (in place), one longer (a copy).
  SpawnSpec s = rank_spec({"x", "yz"}, "new");
  s.env["TEST_EXTRA_FD"] = std::to_string(at);
  s.stdin_fd = null;
  s.stdout_fd = out.w;
  s.stderr_fd = err.w;
  s.inherit_fds = {at};
  std::string why;
  const pid_t pid = sb.adopt(s, why);
  INFO(why);
  REQUIRE(pid > 0);
  CHECK(sb.pid() == 0);  // the worker's now
  for (int fd : {out.w, err.w, at, null}) ::close(fd);
  CHECK(drain(out.r) == "main argv=x yz RANK=3 FOO=new STANDBY=-\n");
  CHECK(drain(err.r) == "err\n");
  CHECK(drain(extra.r) == "extra\n");
  CHECK(exit_code(pid) == 0);
}

TEST_CASE("standby: not adopted for another number of arguments or program, CPUs or a terminal's session, and it "
          "keeps running") {
  const sigset_t mask = current_mask();
  Standby sb(mask, nullptr);
  sb.start(rank_spec({"a", "b"}, "old"));
  const pid_t standby = sb.pid();
  std::string why;
  CHECK(sb.adopt(rank_spec({"a"}, "new"), why) == 0);
  CHECK(why == "its program or number of arguments differ from the rank's");
  SpawnSpec other = rank_spec({"a", "b"}, "new");
  other.exe = "/bin/true";
  CHECK(sb.adopt(other, why) == 0);
  CHECK(why == "its program or number of arguments differ from the rank's");
  SpawnSpec cpus = rank_spec({"a", "b"}, "new");
  cpus.cpus = {0};
  CHECK(sb.adopt(cpus, why) == 0);
  CHECK(why == "the rank is bound to CPUs (--numa_binding)");
  SpawnSpec tty = rank_spec({"a", "b"}, "new");
  tty.new_session = true;
  CHECK(sb.adopt(tty, why) == 0);
  CHECK(why == "the rank keeps the launcher's terminal");
  CHECK(sb.pid() == standby);
  CHECK(::kill(standby, 0) == 0);
  sb.stop();
  CHECK(sb.pid() == 0);
  CHECK(::kill(standby, 0) != 0);  // killed and reaped
}

TEST_CASE("standby: one that never says ready is not adopted, and is killed, and one that ignores DDP_STANDBY_FD has no "
          "rank identity") {
  const sigset_t mask = current_mask();
  Standby sb(mask, nullptr, /*ready_wait_ms=*/200);
  Pipe out;
  SpawnSpec s;
  s.exe = "/bin/sh";
  s.args = {"-c", "echo RANK=${RANK-unset} MASTER_PORT=${MASTER_PORT-unset} FOO=$FOO >&9; exec sleep 30"};
  s.env = {{"PATH", "/usr/bin:/bin"}, {"FOO", "kept"}, {"RANK", "3"}, {"MASTER_PORT", "1234"}};
  // The standby's stdout is /dev/null: the script reports on fd 9.
  REQUIRE(::dup2(out.w, 9) == 9);
  ::close(out.w);
  sb.start(s);
  ::close(9);
  const pid_t standby = sb.pid();
  s.stdin_fd = 0;
  std::string why;
  CHECK(sb.adopt(s, why) == 0);
  CHECK(why == "it was not ready within 0.2 s");
  CHECK(sb.pid() == 0);
  CHECK(::kill(standby, 0) != 0);
  CHECK(drain(out.r) == "RANK=unset MASTER_PORT=unset FOO=kept\n");
}

TEST_CASE("standby: one that died before the launcher reaped it is not adopted, and said so") {
  const sigset_t mask = current_mask();
  Standby sb(mask, nullptr);
  SpawnSpec s;
  s.exe = "/bin/sh";
  s.args = {"-c", "exit 0"};  // ignores DDP_STANDBY_FD: EOF on the socket, never "ready"
  sb.start(s);
  s.stdin_fd = 0;
  std::string why;
  CHECK(sb.adopt(s, why) == 0);
  CHECK(why == "it ended before it was ready");
  CHECK(sb.pid() == 0);
}

TEST_CASE("standby: one that died is noticed and not adopted") {
  const sigset_t mask = current_mask();
  Standby sb(mask, nullptr);
  sb.start(rank_spec({}, "old"));
  const pid_t standby = sb.pid();
  ::kill(standby, SIGKILL);
  CHECK(exit_code(standby) == 128 + SIGKILL);  // reaped as WorkerGroup::reap would
  CHECK_FALSE(sb.died(standby + 100000));
  CHECK(sb.died(standby));
  CHECK(sb.pid() == 0);
  SpawnSpec s = rank_spec({}, "new");
  s.stdin_fd = 0;
  std::string why;
  CHECK(sb.adopt(s, why) == 0);
  CHECK(why == "no standby");
}

TEST_CASE("standby hook: EOF exits 0 before main, and a malformed message is answered with an error and exits 125, never "
          "running main") {
  {
    RawStandby raw;
    ::close(raw.sock);
    CHECK(exit_code(raw.pid) == 0);
    CHECK(drain(raw.out.r).empty());  // main never ran
  }
  using namespace std::string_literals;
  // (The worker's argc is 1: its path alone.)
  for (const std::string& bad :
       {"adopt 2\nfds \n"s, "adopt 1\nfds 0 1\nargv 1\nw\0A=1\0"s, "adopt 1\nfds \nargv 1\nw\0NOEQUALS\0"s,
        "adopt 1\nfds \nargv 1\nw\0A=1"s, "adopt 1\nfds \nargv 2\nw\0x\0A=1\0"s, "adopt 1\nfds \nA=1\0"s}) {
    RawStandby raw;
    REQUIRE(::send(raw.sock, bad.data(), bad.size(), 0) == static_cast<ssize_t>(bad.size()));
    char buf[512];
    const ssize_t n = ::recv(raw.sock, buf, sizeof buf, 0);
    const std::string reply(buf, n > 0 ? static_cast<size_t>(n) : 0);
    INFO(bad << " -> " << reply);
    CHECK(reply.rfind("error ", 0) == 0);
    ::close(raw.sock);
    CHECK(exit_code(raw.pid) == ddp::standby::kFailedExit);
    CHECK(drain(raw.out.r).empty());
  }
}
