#pragma once
// ddp-text's main as a function: src/main.cpp calls it with no hooks, and
// the tests' fault-injecting build of the program (tests/support/
// fault_main.cpp) with a hook that kills a rank at a chosen step.

#include "ddp/loop/trainer.h"

namespace ddp::text {

// Exit codes: 0 done (or --prepare_only done), 2 usage error (one line);
// other errors throw (run_main turns them into exit 1 and the error file).
int text_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks = {});

}  // namespace ddp::text
