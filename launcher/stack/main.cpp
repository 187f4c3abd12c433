// ddp-stack PID: the native stack of every thread of PID, in eu-stack's
// layout, unwound here with libdw. ddp-launch runs it beside itself for its
// stack dumps (launcher/src/diagnose/stack_dump.cpp), so native frames need
// no debugging tool installed; it is its own program so that the launcher
// itself never loads libdw (its start stays in milliseconds) and a rank is
// traced by a process that can be killed at the dump's deadline.
#include "unwind.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr int kMaxFrames = 256;  // eu-stack's default

int usage(const std::string& why) {
  std::fprintf(stderr, "ddp-stack: %s (usage: ddp-stack PID, a process id to print the native stacks of)\n",
               why.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return usage(argc < 2 ? "no PID given" : "one PID only");
  const std::string arg = argv[1];
  char* end = nullptr;
  errno = 0;
  const long pid = std::strtol(arg.c_str(), &end, 10);
  if (arg.empty() || *end != '\0' || errno != 0 || pid <= 0 || pid > 0x3fffffff)
    return usage("'" + arg + "' is not a process id");
  const ddp::stack::ProcessStack stack = ddp::stack::unwind_process(static_cast<pid_t>(pid), kMaxFrames);
  if (!stack.error.empty()) {
    std::fprintf(stderr, "ddp-stack: %s\n", stack.error.c_str());
    return 1;
  }
  const std::string text = ddp::stack::eu_stack_text(stack);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}
