// A tiny worker for the --stall_timeout scenarios: attaches the page in
// $DDP_HEARTBEAT_FILE (ddp::Heartbeat, as the C++ runtime does) and runs
// "collectives" of 1.6 MiB, a few ms each, advancing its heartbeat. With
// STALL_AFTER=K, rank 1 stops after finishing #K (writes $OUT/stopped, then
// sleeps) and every other rank enters #K+1 and waits in it forever, as ranks
// wait in an allreduce for a peer that never comes. Without it, it runs
// COLLECTIVES (default 50) and exits 0. EXIT_ON_RESTART=1: from the first
// restart on (TORCHELASTIC_RESTART_COUNT >= 1) it exits 0 at once.
// Writes $OUT/pid.<rank> (its pid), then $OUT/attached.<rank>.<restart count>
// once attached. IGNORE_TERM=1:
// SIGTERM is ignored (as Lightning's ranks outlive it), so a teardown
// reaches --shutdown_timeout. WAIT_AFTER=K: every rank finishes #K, enters
// #K+1 and waits in it forever (writes $OUT/waiting.<rank> holding its pid),
// as ranks do in an allreduce whose peer a signal stopped inside it.
// ABORT_AT_END=1: rank 1 aborts (SIGABRT) after its collectives, having
// first marked its page as exiting, as a rank whose library crashes in its
// teardown; ABORT_AT_END=2: the same abort without the mark.
#include "ddp/common/heartbeat.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <csignal>
#include <string>
#include <unistd.h>

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

void touch(const std::string& path) {
  const std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

void pause_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

[[noreturn]] void wait_forever() {
  for (;;) pause();
}

}  // namespace

int main() {
  const char* path = std::getenv(ddp::Heartbeat::kEnvVar);
  if (!path) {
    std::fprintf(stderr, "heartbeat_worker: %s is not set\n", ddp::Heartbeat::kEnvVar);
    return 3;
  }
  auto hb = ddp::Heartbeat::attach(path);
  const int rank = std::atoi(env_or("RANK", "0").c_str());
  const int restart = std::atoi(env_or("TORCHELASTIC_RESTART_COUNT", "0").c_str());
  const std::string out = env_or("OUT", ".");
  if (FILE* f = std::fopen((out + "/pid." + std::to_string(rank) + ".tmp").c_str(), "w")) {
    std::fprintf(f, "%d", static_cast<int>(::getpid()));
    std::fclose(f);
    std::rename((out + "/pid." + std::to_string(rank) + ".tmp").c_str(), (out + "/pid." + std::to_string(rank)).c_str());
  }
  touch(out + "/attached." + std::to_string(rank) + "." + std::to_string(restart));
  if (restart >= 1 && env_or("EXIT_ON_RESTART", "0") == "1") return 0;
  if (env_or("IGNORE_TERM", "0") == "1") std::signal(SIGTERM, SIG_IGN);
  const long stall_after = std::atol(env_or("STALL_AFTER", "0").c_str());
  const long wait_after = std::atol(env_or("WAIT_AFTER", "0").c_str());
  const long total = stall_after > 0   ? stall_after + 1
                     : wait_after > 0 ? wait_after + 1
                                      : std::atol(env_or("COLLECTIVES", "50").c_str());
  constexpr uint64_t kBytes = 1677722;  // 1.6 MiB
  for (long seq = 1; seq <= total; ++seq) {
    if (stall_after > 0 && seq == stall_after + 1 && rank == 1) {
      touch(out + "/stopped");
      wait_forever();
    }
    hb->collective_started(static_cast<uint64_t>(seq), ddp::CollectiveKind::Allreduce, kBytes);
    if (stall_after > 0 && seq == stall_after + 1) wait_forever();  // for rank 1, which never comes
    if (wait_after > 0 && seq == wait_after + 1) {
      const std::string tmp = out + "/waiting." + std::to_string(rank) + ".tmp";
      if (FILE* f = std::fopen(tmp.c_str(), "w")) {
        std::fprintf(f, "%d", static_cast<int>(::getpid()));
        std::fclose(f);
        std::rename(tmp.c_str(), (out + "/waiting." + std::to_string(rank)).c_str());
      }
      wait_forever();
    }
    pause_ms(5);
    hb->collective_finished(static_cast<uint64_t>(seq));
    hb->set_step(static_cast<uint64_t>(seq));
  }
  const std::string abort_at_end = env_or("ABORT_AT_END", "0");
  if (rank == 1 && abort_at_end != "0") {
    if (abort_at_end == "1") hb->mark_exiting();
    std::abort();
  }
  return 0;
}
