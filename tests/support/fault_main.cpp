// The tests' fault-injecting builds of the training programs
// (ddp-train-faults, ddp-text-faults: tests/CMakeLists.txt): the program's
// own main function with one hook, DDP_TEST_DIE_AT="RANK:STEP", that makes
// that rank SIGKILL itself before global step STEP on the first attempt
// only (TORCHELASTIC_RESTART_COUNT 0), as a killed worker dies: no cleanup,
// no error file (nor, once brought back in place, again: DDP_TEST_DIE_AGAIN
// makes it). So the restart and resume cases kill a rank at a known
// step, and the programs users run carry no test hook.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>

#include "ddp/worker/run_main.h"

#include DDP_FAULT_PROGRAM_HEADER

namespace {

ddp::loop::LoopHooks die_at_step() {
  ddp::loop::LoopHooks hooks;
  const char* spec = std::getenv("DDP_TEST_DIE_AT");
  if (spec == nullptr || *spec == '\0') return hooks;
  const std::string s = spec;
  const auto colon = s.find(':');
  int rank = -1;
  long long step = -1;
  try {
    if (colon == std::string::npos) throw std::invalid_argument(s);
    rank = std::stoi(s.substr(0, colon));
    step = std::stoll(s.substr(colon + 1));
  } catch (const std::exception&) {
    std::cerr << "DDP_TEST_DIE_AT: '" << s << "' is not RANK:STEP" << std::endl;
    std::exit(2);
  }
  // A rank brought back in place (DDP_RECOVERY_GENERATION) has the same
  // restart count: it dies again only with DDP_TEST_DIE_AGAIN=1 (the
  // recovery's own failure cases).
  const char* again = std::getenv("DDP_TEST_DIE_AGAIN");
  const char* returning = std::getenv("DDP_RECOVERY_GENERATION");
  const bool die_again = again != nullptr && std::string(again) == "1";
  const bool returned = returning != nullptr && *returning != '\0';
  hooks.before_step = [rank, step, die_again, returned](int r, std::int64_t global_step, int restart_count) {
    if (r == rank && restart_count == 0 && global_step == step && (!returned || die_again)) {
      std::cout.flush();
      std::raise(SIGKILL);
    }
  };
  return hooks;
}

}  // namespace

int main(int argc, char** argv) {
  const ddp::loop::LoopHooks hooks = die_at_step();
  return ddp::worker::run_main(argc, argv, [&](int c, char** v) { return DDP_FAULT_PROGRAM_MAIN(c, v, hooks); });
}
