// process/signals.h in a forked child (it changes the process's mask and
// dispositions): what the channel does with signals that arrive when no
// loop reads it any more, and with signals the launcher inherited ignored.
#include "ddp/launcher/process/signals.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

using namespace ddp::launcher;

namespace {

// Runs f in a child; its wait status.
template <class F>
int in_child(F f) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) ::_exit(f());
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("signals: a dump request pending when the channel closes does not kill the launcher") {
  const int status = in_child([] {
    {
      SignalChannel channel;  // SIGUSR2 unlisted: the live dump's request
      ::raise(SIGUSR2);       // arrives after the last loop read the channel
    }
    return 0;  // still here: the request was dropped, not delivered
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("signals: signals the launcher inherited ignored still reach the channel, and its children get them at default") {
  const int status = in_child([] {
    ::signal(SIGINT, SIG_IGN);  // a background job of a non-interactive shell
    ::signal(SIGQUIT, SIG_IGN);
    ::signal(SIGCHLD, SIG_IGN);
    SignalChannel channel;
    ::raise(SIGINT);
    const std::vector<int> got = channel.drain();
    if (got.size() != 1 || got[0] != SIGINT) return 1;
    struct sigaction sa;
    for (int sig : {SIGINT, SIGQUIT, SIGCHLD, SIGTERM, SIGHUP}) {
      ::sigaction(sig, nullptr, &sa);
      if (sa.sa_handler != SIG_DFL) return 2;  // exec keeps SIG_IGN: workers would inherit it
    }
    return 0;
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
