#pragma once
// Stacks of every thread of every rank, for a hang (a stall, a SIGQUIT, a
// live-dump request, a worker that outlived --shutdown_timeout). The
// launcher never links a debugger: it runs the tools as child processes, one
// chain per rank and all ranks at once, each bounded by timeout_s:
//  - Python frames: `py-spy dump --pid P` (PyPI py-spy), for a target whose
//    executable is a Python interpreter (is_python_process), when py-spy is
//    on PATH;
//  - native frames: `eu-stack -p P` (elfutils), else `gdb -p P -batch -ex
//    'thread apply all bt'` (tens of milliseconds against seconds on a
//    LibTorch process, and eu-stack also unwinds its JIT frames; see
//    docs/architecture.md).
// Each rank's output goes to <dir>/stacks.<tag>.rank_<rank>.txt (0600). A
// tool that is missing or fails is one line in `note` (what to install, or
// its first error line); what the other tool found is still dumped. A tool
// still running at the deadline is SIGKILLed and its target sent SIGCONT (a
// tracer killed between attach and detach could leave it stopped). The tools
// attach, read and detach: a target is paused for the read, never stopped for
// good or killed. Called from the launcher's main thread (the tools' death
// signal is tied to it); waits only for its own children (pidfds), never
// reaps a worker.

#include <string>
#include <sys/types.h>
#include <vector>

namespace ddp::launcher {

struct StackTarget {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = 0;
  bool python = false;  // dump Python frames too (is_python_process)
};

struct RankStacks {
  int rank = 0;
  pid_t pid = 0;
  std::string file;       // the dump; "" when it could not be written
  std::string signature;  // innermost frames of the main thread: "sleep (train.py:9) <- step (train.py:20)"
  std::string note;       // "" or one line per missing/failed tool
  int local_rank = 0;
};

// The tools, as paths; "" where not found.
struct StackTools {
  std::string py_spy;
  std::string eu_stack;
  std::string gdb;
};
// Looks each tool up in `path_env` (a PATH value).
StackTools find_stack_tools(const std::string& path_env);

// Whether /proc/<pid>/exe is a Python interpreter (its name starts with "python").
bool is_python_process(pid_t pid);

// Dumps every target at once into `dir` (which must exist), with the tools
// found on this process's PATH, resp. the given ones. Returns one entry per
// target, in the targets' order, within about timeout_s.
std::vector<RankStacks> dump_stacks(const std::vector<StackTarget>& targets, const std::string& dir,
                                    const std::string& tag, double timeout_s);
std::vector<RankStacks> dump_stacks(const std::vector<StackTarget>& targets, const std::string& dir,
                                    const std::string& tag, double timeout_s, const StackTools& tools);

// How many of the innermost named frames make a signature.
constexpr int kSignatureFrames = 4;

// The main thread's (tid == pid) innermost frames of eu-stack's or gdb's
// output, innermost first, joined by " <- ": arguments, template arguments,
// addresses, namespaces but the last, symbol versions and libc's internal
// wait frames left out ("pthread_cond_wait <- Work::wait <- AsyncWork::wait
// <- ProcessGroup::allreduce"). "" when the main thread is not in it;
// kNoSymbols when it has frames but none named (JIT code, a stripped library).
constexpr const char* kNoSymbols = "?? (no symbols: JIT or stripped code)";
std::string native_signature(const std::string& tool_output, pid_t pid);
// The same from py-spy's dump (the thread with that id, else "MainThread"):
// "inner (sl.py:3) <- outer (sl.py:5)".
std::string python_signature(const std::string& py_spy_output, pid_t pid);

// One line per group of ranks with the same signature, the largest group
// first, so the odd rank stands out, then each distinct note once and where
// the files are:
//   ranks 0,2,3: pthread_cond_wait <- Work::wait <- AsyncWork::wait
//   rank 1: nanosleep <- main
//   note: py-spy is not on PATH: no Python frames (pip install py-spy)
//   files: /tmp/ddp-launch-1a2b/stacks.sigquit.1.rank_*.txt
// Each line ends in '\n'; "" for no ranks.
std::string format_stack_summary(const std::vector<RankStacks>& stacks);

}  // namespace ddp::launcher
