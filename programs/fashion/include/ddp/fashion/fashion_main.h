#pragma once
// ddp-train's main as a function: src/main.cpp calls it with no hooks, and
// the tests' fault-injecting build of the program (tests/support/
// fault_main.cpp) with a hook that kills a rank at a chosen step.

#include "ddp/loop/trainer.h"

namespace ddp::fashion {

// Exit codes: 0 done, 2 usage error (one line); other errors throw (run_main
// turns them into exit 1, one line and the error file).
int fashion_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks = {});

}  // namespace ddp::fashion
