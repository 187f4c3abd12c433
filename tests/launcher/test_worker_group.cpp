// WorkerGroup with real processes but without the launcher: spawn, reap,
// signal only groups that still exist, and the group counts as empty only
// once every process in it is gone.
#include "ddp/launcher/process/worker_group.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace ddp::launcher;

namespace {

// Reaps until cond() or the deadline, polling: this test has no signalfd.
template <typename F>
bool reap_until(WorkerGroup& g, std::vector<WorkerGroup::Event>& seen, F cond, double timeout_s = 10) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!cond()) {
    for (auto& e : g.reap()) seen.push_back(e);
    if (cond()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

SpawnSpec sh(const std::string& script) {
  SpawnSpec s;
  s.exe = "/bin/sh";
  s.args = {"-c", script};
  s.env = {{"PATH", "/usr/bin:/bin"}};
  return s;
}

}  // namespace

TEST_CASE("a worker group: spawn, reap, empty only when every process of it is gone") {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // like the launcher: the grandchild comes back to us
  sigset_t mask;
  sigemptyset(&mask);
  WorkerGroup g(mask, nullptr);
  // The worker exits at once, leaving a child in its group that waits for SIGTERM.
  const pid_t pid = g.spawn(sh("sleep 300 & exit 3"), 0, false);
  CHECK(pid > 1);
  CHECK(::getpgid(pid) == pid);        // its own group
  CHECK(::getsid(pid) == ::getsid(0));  // in our session: no stdin kept, no new session
  std::vector<WorkerGroup::Event> seen;
  REQUIRE(reap_until(g, seen, [&] { return g.running_workers() == 0; }));
  REQUIRE(seen.size() >= 1);
  CHECK(seen[0].is_worker);
  CHECK(seen[0].pid == pid);
  CHECK(WEXITSTATUS(seen[0].status) == 3);
  CHECK_FALSE(g.empty());  // the sleep is still in the group
  CHECK(g.signal_all(SIGTERM) == 1);
  REQUIRE(reap_until(g, seen, [&] { return g.empty(); }));
  CHECK(seen.back().pid != pid);
  CHECK_FALSE(seen.back().is_worker);  // the adopted grandchild
  CHECK(g.signal_all(SIGTERM) == 0);   // gone groups are never signalled again
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("a worker group: exec failures throw with a shell's code and leave nothing behind") {
  sigset_t mask;
  sigemptyset(&mask);
  WorkerGroup g(mask, nullptr);
  SpawnSpec s;
  s.exe = "/nonexistent/program";
  try {
    g.spawn(s, 0, false);
    FAIL("no SpawnError");
  } catch (const SpawnError& e) {
    CHECK_FALSE(e.fork_failed);
    CHECK(e.shell_code() == 127);
  }
  CHECK(g.empty());
  CHECK(g.running_workers() == 0);
  CHECK(g.signal_all(SIGTERM) == 0);
  int st;
  CHECK(::waitpid(-1, &st, WNOHANG) == -1);  // the failed child was reaped: ECHILD
}

TEST_CASE("a worker group: a stopped worker is reported, and SIGCONT follows a teardown signal") {
  sigset_t mask;
  sigemptyset(&mask);
  WorkerGroup g(mask, nullptr);
  const pid_t pid = g.spawn(sh("trap 'exit 7' TERM; kill -STOP $$; while :; do sleep 1; done"), 0, false);
  std::vector<WorkerGroup::Event> seen;
  REQUIRE(reap_until(g, seen, [&] {
    for (auto& e : seen)
      if (e.kind == WorkerGroup::Event::Stopped && e.pid == pid) return true;
    return false;
  }));
  g.signal_all(SIGTERM);  // without the SIGCONT it would stay stopped with TERM pending
  REQUIRE(reap_until(g, seen, [&] { return g.running_workers() == 0; }));
  CHECK(WIFEXITED(seen.back().status));
}

TEST_CASE("the process limit text names the limits, for a refused fork only") {
  CHECK(process_limit_text(EAGAIN).find("kernel.pid_max") != std::string::npos);
  CHECK(process_limit_text(ENOENT).empty());
}
