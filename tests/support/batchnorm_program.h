#pragma once
// A test-only training program on the loop library with buffers in its
// model (ddp-batchnorm-faults: tests/CMakeLists.txt builds it with the
// tests' fault hooks, tests/support/fault_main.cpp). Neither ddp-train's
// CNN nor ddp-text's has a buffer; this MLP has a BatchNorm1d, whose running
// statistics a step's forward changes before its collectives, so the
// in-place recovery case (tests/train/test_in_place_recovery.cpp) can check
// that a survivor puts them back. Three classes of a synthetic data set, the
// loop's classifier defaults; no files read.

#include "ddp/loop/trainer.h"

namespace ddp::test {

int batchnorm_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks = {});

}  // namespace ddp::test
