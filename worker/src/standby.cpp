// The standby hook: a program that links the worker runtime, started by the
// launcher with DDP_STANDBY_FD set, waits here, before main, with LibTorch
// already loaded, until the launcher makes it a rank (or closes the socket).
// The wire: common/standby_protocol.h. Why before main: most of a returning
// rank's start-up is the dynamic loading of LibTorch's libraries and their
// static initializers, which run before any constructor of the program
// itself; an empty main() linked to libtorch_cpu takes as long.
// Plain POSIX, no LibTorch: this runs among static initializers. Everything
// is parsed and checked before anything is installed, so a malformed message
// changes nothing; a failure after that (a dup2, a setenv) still ends the
// process before main. Linked into every program of the runtime by
// `-u ddp_worker_standby_anchor` (worker/CMakeLists.txt), like
// malloc_tuning.cpp.

#include "ddp/common/standby_protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <vector>

namespace {

namespace sb = ddp::standby;

[[noreturn]] void fail(int sock, const std::string& why) {
  std::fprintf(stderr, "ddp standby (pid %d): %s; exiting before main (code %d)\n", static_cast<int>(::getpid()),
               why.c_str(), sb::kFailedExit);
  if (sock >= 0) {
    const std::string line = "error " + why + "\n";
    (void)::send(sock, line.data(), line.size(), MSG_NOSIGNAL);
  }
  ::_exit(sb::kFailedExit);
}

// A decimal fd number; -1 when it is not one.
int fd_number(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::atoi(s.c_str());
}

struct Adoption {
  std::vector<int> targets;          // where each received fd goes
  std::vector<std::string> argv;     // the rank's, argv[0] first
  std::vector<std::string> env;      // "K=V"
};

// Parses step 2 of the wire (common/standby_protocol.h); "" when it is well
// formed, else why not.
std::string parse(const std::string& msg, size_t fds_received, Adoption& out) {
  const std::string head = "adopt " + std::to_string(sb::kProtocol) + "\n";
  if (msg.compare(0, head.size(), head) != 0) return "the launcher's message does not start with 'adopt " +
                                                      std::to_string(sb::kProtocol) + "'";
  const size_t line_end = msg.find('\n', head.size());
  if (line_end == std::string::npos || msg.compare(head.size(), 4, "fds ") != 0)
    return "the launcher's message has no 'fds' line";
  const std::string list = msg.substr(head.size() + 4, line_end - head.size() - 4);
  size_t start = 0;
  while (start <= list.size() && !list.empty()) {
    const size_t sp = list.find(' ', start);
    const std::string word = list.substr(start, sp == std::string::npos ? std::string::npos : sp - start);
    const int t = fd_number(word);
    if (t < 0) return "fd target '" + word + "' is not a number";
    for (int seen : out.targets)
      if (seen == t) return "fd target " + word + " is named twice";
    out.targets.push_back(t);
    if (sp == std::string::npos) break;
    start = sp + 1;
  }
  if (out.targets.size() != fds_received)
    return std::to_string(out.targets.size()) + " fd targets for " + std::to_string(fds_received) + " fds received";
  const size_t argv_end = msg.find('\n', line_end + 1);
  if (argv_end == std::string::npos || msg.compare(line_end + 1, 5, "argv ") != 0)
    return "the launcher's message has no 'argv' line";
  const int argc = fd_number(msg.substr(line_end + 6, argv_end - line_end - 6));
  if (argc < 1) return "the launcher's 'argv' line names no count";
  size_t at = argv_end + 1;
  for (int i = 0; i < argc; ++i) {
    const size_t nul = msg.find('\0', at);
    if (nul == std::string::npos) return "the launcher's message has fewer than " + std::to_string(argc) + " arguments";
    out.argv.push_back(msg.substr(at, nul - at));
    at = nul + 1;
  }
  while (at < msg.size()) {
    const size_t nul = msg.find('\0', at);
    if (nul == std::string::npos) return "the environment's last entry is not NUL-terminated";
    std::string entry = msg.substr(at, nul - at);
    if (entry.empty() || entry.find('=') == std::string::npos || entry[0] == '=')
      return "environment entry '" + entry.substr(0, 64) + "' is not NAME=VALUE";
    out.env.push_back(std::move(entry));
    at = nul + 1;
  }
  return "";
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

// glibc calls constructors with main's argc and argv (the same array main
// gets), so the rank's arguments replace the standby's before main: in place
// where one has the same length (ps shows it), else a copy.
__attribute__((constructor)) void wait_as_standby(int argc, char** argv, char**) {
  const char* v = std::getenv(sb::kFdEnvVar);
  if (v == nullptr) return;
  const int sock = fd_number(v);
  if (sock < 0 || ::fcntl(sock, F_GETFD) < 0)
    fail(-1, std::string(sb::kFdEnvVar) + "=" + v + " is not an open socket");
  const std::string ready = "ready " + std::to_string(sb::kProtocol) + "\n";
  if (::send(sock, ready.data(), ready.size(), MSG_NOSIGNAL) < 0) ::_exit(0);  // the launcher is gone

  // Step 2: the packet's length first (MSG_TRUNC reports a packet's whole size).
  char probe;
  ssize_t len;
  do len = ::recv(sock, &probe, 1, MSG_PEEK | MSG_TRUNC);
  while (len < 0 && errno == EINTR);
  if (len == 0) ::_exit(0);  // EOF: not needed
  if (len < 0) fail(-1, std::string("reading the launcher's socket: ") + std::strerror(errno));
  if (static_cast<size_t>(len) > sb::kMaxMessage) fail(sock, "the launcher's message is too long");
  std::string msg(static_cast<size_t>(len), '\0');
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * sb::kMaxFds)];
  iovec iov{msg.data(), msg.size()};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = control;
  mh.msg_controllen = sizeof control;
  ssize_t got;
  do got = ::recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got < 0) fail(sock, std::string("reading the launcher's message: ") + std::strerror(errno));
  std::vector<int> received;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        received.push_back(fd);
      }
    }
  if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || got != len) {
    close_all(received);
    fail(sock, "the launcher's message was cut short (more than " + std::to_string(sb::kMaxFds) + " fds?)");
  }
  Adoption a;
  std::string why = parse(msg, received.size(), a);
  if (why.empty() && a.argv.size() != static_cast<size_t>(argc))
    why = "the rank has " + std::to_string(a.argv.size()) + " arguments, the standby " + std::to_string(argc);
  if (!why.empty()) {
    close_all(received);
    fail(sock, why);
  }

  // Nothing of ours may sit on a target: move the received fds and the
  // socket above every target (F_DUPFD takes the lowest free number at or
  // above), then the targets must be free (0-2 excepted: stdio, replaced).
  int floor = sock + 1;
  for (int t : a.targets) floor = std::max(floor, t + 1);
  for (int& fd : received) {
    const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (moved < 0) fail(sock, std::string("moving a received fd: ") + std::strerror(errno));
    ::close(fd);
    fd = moved;
  }
  int s = ::fcntl(sock, F_DUPFD_CLOEXEC, floor);
  if (s < 0) fail(sock, std::string("moving the socket: ") + std::strerror(errno));
  ::close(sock);
  for (int t : a.targets)
    if (t > 2 && ::fcntl(t, F_GETFD) >= 0) {
      char what[256] = "?";
      const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(t)).c_str(), what, sizeof what - 1);
      if (n > 0) what[n] = '\0';
      fail(s, "fd " + std::to_string(t) + " (" + what + ") is in use in the standby (opened before main)");
    }

  // Install: the environment, then the fds (dup2 leaves them inheritable, as
  // a spawned rank has them).
  if (::clearenv() != 0) fail(s, "clearenv failed");
  for (std::string& e : a.env) {
    const size_t eq = e.find('=');
    e[eq] = '\0';
    if (::setenv(e.c_str(), e.c_str() + eq + 1, 1) != 0)
      fail(s, "setenv " + std::string(e.c_str()) + ": " + std::strerror(errno));
  }
  for (int i = 0; i < argc; ++i) {
    const std::string& want = a.argv[static_cast<size_t>(i)];
    if (want == argv[i]) continue;
    if (want.size() == std::strlen(argv[i])) std::memcpy(argv[i], want.data(), want.size());
    else if ((argv[i] = ::strdup(want.c_str())) == nullptr) fail(s, "no memory for the rank's arguments");
  }
  for (size_t i = 0; i < received.size(); ++i)
    if (::dup2(received[i], a.targets[i]) < 0)
      fail(s, "dup2 onto fd " + std::to_string(a.targets[i]) + ": " + std::strerror(errno));
  close_all(received);
  static const char ok[] = "ok\n";
  if (::send(s, ok, sizeof ok - 1, MSG_NOSIGNAL) < 0) ::_exit(sb::kFailedExit);  // the launcher is gone
  ::close(s);
}

}  // namespace

// Referenced with -u by everything that links ddp_worker (worker/CMakeLists.txt),
// so the constructor above is always linked.
extern "C" {
extern const int ddp_worker_standby_anchor;
const int ddp_worker_standby_anchor = 0;
}
