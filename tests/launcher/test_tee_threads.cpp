// The tee has no thread: --tee's pipes are read in the supervisor's poll
// loop (output_tee.h), so there is nothing for ThreadSanitizer to check
// there (docs/testing.md, "ThreadSanitizer"); this keeps that statement
// true. The launcher's one other thread is the workers' store's
// (workers_store.h, a single node's run), which shares nothing with the
// tee; its own cases are [tsan].
#include "scenario_util.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

using namespace ddp::test;

namespace {

// The "Threads:" count of /proc/<pid>/status (0 when it cannot be read).
int threads_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return 0;
}

}  // namespace

TEST_CASE("the tee runs in the launcher's main thread, while workers are up", "[tsan]") {
  // The launcher's threads with --tee and without: the tee adds none. (Not
  // a fixed count: a sanitizer's runtime adds threads of its own, TSan its
  // background thread once the workers' store starts one.)
  auto threads_while_up = [](std::vector<std::string> tee) {
    TempDir out;
    std::vector<std::string> args{launcher(), "--nproc_per_node=2", "--standalone"};
    args.insert(args.end(), tee.begin(), tee.end());
    args.push_back(scenario_worker());
    Proc p(args, scenario_env(out, "sleep"));
    REQUIRE(wait_until([&] {
      return std::filesystem::exists(out.file("ready.0")) && std::filesystem::exists(out.file("ready.1"));
    }, 60));
    const int threads = threads_of(p.pid());
    p.signal(SIGTERM);
    INFO(p.output());
    CHECK(p.wait(60).has_value());
    return threads;
  };
  const int plain = threads_while_up({});
  const int teed = threads_while_up({"--tee", "3"});
  CHECK(plain >= 2);  // the main thread and the workers' store's, at least
  CHECK(teed == plain);
}
