// ddp-worker-test-helper: the multi-rank programs the worker tests spawn (one
// process per rank, environment set by the test or by ddp-launch). Every mode
// runs under run_main, so a failure becomes exit code 1 plus a message, never
// a hang: the tests bound every run with a timeout.
//
//   ddp-worker-test-helper <mode> [key=value ...]
// The modes are kModes below, one line each; each mode's comment (in the
// file of its concern, helper.h lists them) says what it does.

#include <stdexcept>
#include <string>

#include "ddp/worker/run_main.h"
#include "helper.h"

namespace {

struct Entry {
  const char* name;
  worker_helper::Mode run;
};

using namespace worker_helper;
const Entry kModes[] = {
    // collectives.cpp
    {"init", init},
    {"collectives", collectives},
    {"shm", shm},
    {"shm_room", shm_room},
    {"interop", interop},
    {"rank0-decides", rank0_decides_mode},
    // ddp.cpp
    {"parity", parity},
    {"views", views},
    {"overlap", overlap},
    {"unused", unused},
    // faults.cpp
    {"throw", throw_mode},
    {"hook-throw", hook_throw},
    {"backward-throws", backward_throws},
    {"throws-after-reduction", throws_after_reduction},
    {"train-forever", train_forever},
    {"abort-at-exit", abort_at_exit},
    // heartbeat.cpp
    {"heartbeat", heartbeat},
    {"stall-step", stall_step},
    {"slow-rank", slow_rank},
    // checkpoint.cpp
    {"ckpt-loop", ckpt_loop},
    // memory.cpp
    {"alloc-faults", alloc_faults},
};

std::string mode_names() {
  std::string out;
  for (const auto& m : kModes) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return ddp::worker::run_main(argc, argv, [](int argc, char** argv) -> int {
    if (argc < 2) throw std::invalid_argument("usage: ddp-worker-test-helper <mode> [key=value ...]; modes: " + mode_names());
    const std::string mode = argv[1];
    for (const auto& m : kModes)
      if (mode == m.name) return m.run(argc, argv);
    throw std::invalid_argument("unknown mode '" + mode + "' (modes: " + mode_names() + ")");
  });
}
