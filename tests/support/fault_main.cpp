// The tests' fault-injecting builds of the training programs
// (ddp-train-faults, ddp-text-faults: tests/CMakeLists.txt): the program's
// own main function with hooks that act on the first attempt only
// (TORCHELASTIC_RESTART_COUNT 0; nor, once brought back in place, again:
// DDP_TEST_DIE_AGAIN makes it). Two SIGKILL the rank as a killed worker
// dies: no cleanup, no error file:
// - DDP_TEST_DIE_AT="RANKS:STEP" (RANKS: one rank or several, "1,2"):
//   before global step STEP (0: the run's first);
// - DDP_TEST_DIE_AFTER_STEP="RANKS:STEP": once STEP steps are done,
//   outside a step (before a mid-epoch evaluation, a step checkpoint or the
//   epoch's end).
// - DDP_TEST_KILL_LAUNCHER_AT="RANKS:STEP": before global step STEP, its
//   launcher (the parent) first, then the rank: a node lost with its
//   launcher (a hot spare's takeover).
// One makes a survivor fall a step behind:
// - DDP_TEST_FAIL_IN_STEP="RANKS:STEP": global step STEP throws after its
//   collectives, before the optimizer's step, as a step whose last
//   collective failed on this rank alone (the others finished it); once.
// So the restart, resume and recovery cases fail ranks at a known step,
// and the programs users run carry no test hook.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "ddp/worker/run_main.h"

#include DDP_FAULT_PROGRAM_HEADER

namespace {

// The ranks and the step of NAME="RANKS:STEP"; exits 2 on a bad value.
bool parse_spec(const char* name, std::set<int>& ranks, long long& step) {
  const char* spec = std::getenv(name);
  if (spec == nullptr || *spec == '\0') return false;
  const std::string s = spec;
  const auto colon = s.find(':');
  try {
    if (colon == std::string::npos) throw std::invalid_argument(s);
    std::istringstream list(s.substr(0, colon));
    for (std::string r; std::getline(list, r, ',');) ranks.insert(std::stoi(r));
    step = std::stoll(s.substr(colon + 1));
  } catch (const std::exception&) {
    std::cerr << name << ": '" << s << "' is not RANKS:STEP (RANKS: 1 or 1,2)" << std::endl;
    std::exit(2);
  }
  return true;
}

// A rank brought back in place (DDP_RECOVERY_GENERATION) has the same
// restart count: it dies again only with DDP_TEST_DIE_AGAIN=1 (the
// recovery's own failure cases).
bool may_die(int restart_count) {
  const char* again = std::getenv("DDP_TEST_DIE_AGAIN");
  const char* returning = std::getenv("DDP_RECOVERY_GENERATION");
  const bool die_again = again != nullptr && std::string(again) == "1";
  const bool returned = returning != nullptr && *returning != '\0';
  return restart_count == 0 && (!returned || die_again);
}

void die() {
  std::cout.flush();
  std::raise(SIGKILL);
}

class DieAfterStep final : public ddp::loop::Callback {
 public:
  DieAfterStep(std::set<int> ranks, long long step) : ranks_(std::move(ranks)), step_(step) {}
  void on_step_end(const ddp::loop::StepEnd& e) override {
    const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (ranks_.count(e.rank) && e.global_step == step_ && may_die(count ? std::atoi(count) : 0)) die();
  }

 private:
  std::set<int> ranks_;
  long long step_;
};

ddp::loop::LoopHooks fault_hooks() {
  ddp::loop::LoopHooks hooks;
  std::set<int> ranks;
  long long step = -1;
  if (parse_spec("DDP_TEST_DIE_AT", ranks, step))
    hooks.before_step = [ranks, step](int r, std::int64_t global_step, int restart_count) {
      if (ranks.count(r) && global_step == step && may_die(restart_count)) die();
    };
  std::set<int> node_ranks;
  long long node_step = -1;
  if (parse_spec("DDP_TEST_KILL_LAUNCHER_AT", node_ranks, node_step))
    hooks.before_step = [node_ranks, node_step](int r, std::int64_t global_step, int restart_count) {
      if (!node_ranks.count(r) || global_step != node_step || !may_die(restart_count)) return;
      ::kill(::getppid(), SIGKILL);
      die();
    };
  std::set<int> after_ranks;
  long long after = -1;
  if (parse_spec("DDP_TEST_DIE_AFTER_STEP", after_ranks, after))
    hooks.callbacks.push_back(std::make_shared<DieAfterStep>(after_ranks, after));
  std::set<int> fail_ranks;
  long long fail = -1;
  if (parse_spec("DDP_TEST_FAIL_IN_STEP", fail_ranks, fail))
    hooks.after_collectives = [fail_ranks, fail, once = std::make_shared<bool>(false)](
                                  int r, std::int64_t global_step, int restart_count) {
      if (*once || !fail_ranks.count(r) || global_step != fail || !may_die(restart_count)) return;
      *once = true;  // a step redone goes through
      std::cerr << "test fault: rank " << r << "'s global step " << global_step << " fails after its collectives"
                << std::endl;
      throw std::runtime_error("test fault: a collective failed on rank " + std::to_string(r) + " alone");
    };
  return hooks;
}

}  // namespace

int main(int argc, char** argv) {
  const ddp::loop::LoopHooks hooks = fault_hooks();
  return ddp::worker::run_main(argc, argv, [&](int c, char** v) { return DDP_FAULT_PROGRAM_MAIN(c, v, hooks); });
}
