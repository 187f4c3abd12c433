// --stall_timeout's option and what every worker gets for it: the heartbeat
// page's path (DDP_HEARTBEAT_FILE) in the run directory.
#include "ddp/common/heartbeat.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/process/heartbeat_pages.h"
#include "ddp/launcher/watch/progress_watch.h"
#include "ddp/launcher/process/run_dir.h"
#include "ddp/launcher/config/worker_env.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include "usage_message.h"

#include <chrono>
#include <ctime>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::launcher;
using ddp::test::usage_message;

TEST_CASE("stall_timeout option: off by default with both spellings and PET_STALL_TIMEOUT where the command line wins") {
  CHECK(parse_launch_options({"x"}, {}).stall_timeout_s == 0);
  CHECK(parse_launch_options({"--stall_timeout", "5", "x"}, {}).stall_timeout_s == 5);
  CHECK(parse_launch_options({"--stall-timeout=1.5", "x"}, {}).stall_timeout_s == 1.5);
  CHECK(parse_launch_options({"--stall_timeout", "1", "x"}, {}).stall_timeout_s == 1);  // the floor itself
  CHECK(parse_launch_options({"--stall_timeout", "1e3", "x"}, {}).stall_timeout_s == 1000);
  CHECK(parse_launch_options({"x"}, {{"PET_STALL_TIMEOUT", "300"}}).stall_timeout_s == 300);
  CHECK(parse_launch_options({"--stall_timeout", "7", "x"}, {{"PET_STALL_TIMEOUT", "300"}}).stall_timeout_s == 7);
}

TEST_CASE("stall_timeout option: below 1 s or non-numbers are one-line errors naming the value") {
  const std::string hint = "; give how long a rank may make no progress before the job ends as stalled (e.g. 300), "
                           "or leave it out to never check";
  const std::string floor = ": must be at least 1 s (CPU time grows in 10 ms ticks and the launcher looks every "
                            "timeout / 4: below 1 s a working rank can look idle)";
  CHECK(usage_message({"--stall_timeout", "0", "x"}) == "--stall_timeout 0" + floor + hint);
  CHECK(usage_message({"--stall-timeout=-3", "x"}) == "--stall-timeout -3" + floor + hint);
  CHECK(usage_message({"--stall_timeout", "0.001", "x"}) == "--stall_timeout 0.001" + floor + hint);
  CHECK(usage_message({"--stall_timeout", "1e-9", "x"}) == "--stall_timeout 1e-9" + floor + hint);
  CHECK(usage_message({"--stall_timeout", "0.999", "x"}) == "--stall_timeout 0.999" + floor + hint);
  CHECK(usage_message({"--stall_timeout", "5s", "x"}) == "--stall_timeout 5s: not a number of seconds" + hint);
  CHECK(usage_message({"x"}, {{"PET_STALL_TIMEOUT", "nan"}}) == "PET_STALL_TIMEOUT=nan: not a number of seconds" + hint);
  // Decimal only, as every other option: 0x10 is not 16.
  CHECK(usage_message({"--stall_timeout", "0x10", "x"}) == "--stall_timeout 0x10: not a number of seconds" + hint);
  CHECK(usage_message({"--stall_timeout", " 5", "x"}) == "--stall_timeout  5: not a number of seconds" + hint);
}

TEST_CASE("every worker gets its own sealed heartbeat page and none inherited") {
  HeartbeatPages pages;
  ProgressWatch watch(0, pages);
  CHECK_FALSE(watch.watching());
  CHECK(watch.ms_to_check() == -1);
  const int fd = pages.create(1);
  REQUIRE(fd >= 0);
  CHECK((::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);  // only the spawn hands it to its one worker
  CHECK(::ftruncate(fd, 0) != 0);                    // sealed: nobody can shrink it under a mapping
  CHECK_FALSE(pages.read(1));  // nobody attached yet
  CHECK_FALSE(pages.page(0));  // none asked for
  auto worker = ddp::Heartbeat::attach(ddp::Heartbeat::fd_path(::dup(fd)));
  worker->collective_started(3, ddp::CollectiveKind::Broadcast, 10);
  REQUIRE(pages.read(1));
  CHECK(pages.read(1)->collective_started == 3);
  pages.started(1);
  CHECK(::fcntl(fd, F_GETFD) == -1);  // the launcher's fd is closed once the worker runs; the page stays
  watch.started(1, 5, 4242);
  CHECK(watch.collective_summary() == "rank 5 waits in #3 (broadcast, 10 B)");

  LaunchOptions o = parse_launch_options({"x"}, {});
  GroupSpec g;
  g.opts = &o;
  g.nproc = 2;
  const std::string path = ddp::Heartbeat::fd_path(7);
  const EnvMap parent = {{"DDP_HEARTBEAT_FILE", "/elsewhere/outer.heartbeat"}};
  CHECK(worker_environment(parent, g, 1, "/e.json", path).at("DDP_HEARTBEAT_FILE") == path);
  CHECK(worker_environment(parent, g, 1, "/e.json", "").count("DDP_HEARTBEAT_FILE") == 0);
}

TEST_CASE("the CPU time of a process group and whether a process waits in a futex come from /proc") {
  // Burn at least 50 ms of CPU time in this process (of our group): counted.
  const auto burn_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  timespec cpu_now{};
  do {
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_now);
  } while (cpu_now.tv_sec == 0 && cpu_now.tv_nsec < 50000000 && std::chrono::steady_clock::now() < burn_until + std::chrono::seconds(5));
  const auto cpu = process_group_cpu_seconds({::getpgrp()});
  REQUIRE(cpu.size() == 1);
  CHECK(cpu[0].first == ::getpgrp());
  CHECK(cpu[0].second >= 0.04);  // clock ticks of 10 ms
  CHECK(process_group_cpu_seconds({999999999}).empty());
  // This thread is running, not in a futex.
  CHECK(blocked_in_futex(::getpid()) == std::optional<bool>(false));
  CHECK_FALSE(blocked_in_futex(999999999));
}
