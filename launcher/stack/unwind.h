// Native stacks of another process, unwound in this one with elfutils'
// libdw (the library eu-stack is built on): ptrace-attach every thread,
// unwind each through the modules' CFI, name each frame from the symbol
// tables, detach. The text is eu-stack's, so the launcher's stack summary
// reads it as it reads eu-stack's (launcher/src/diagnose/stack_summary.cpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::stack {

struct Frame {
  std::uint64_t pc = 0;
  std::string symbol;  // demangled; empty when no symbol table names the address
};

struct ThreadStack {
  pid_t tid = 0;
  std::vector<Frame> frames;
  std::string error;  // why there is no frame, or why a frame's address could not be read
};

struct ProcessStack {
  pid_t pid = 0;
  std::string error;  // the process could not be attached at all (threads is empty)
  std::vector<ThreadStack> threads;
};

// At most max_frames frames a thread (eu-stack's default is 256).
ProcessStack unwind_process(pid_t pid, int max_frames);

// eu-stack's layout: "PID 42 - process", then per thread "TID 42:" and
// "#0  0x00007f0123456789 name" lines.
std::string eu_stack_text(const ProcessStack& stack);

}  // namespace ddp::stack
