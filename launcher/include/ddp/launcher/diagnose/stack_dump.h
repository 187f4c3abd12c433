#pragma once
// Stacks of every thread of every rank, for a hang (a stall, a SIGQUIT, a
// live-dump request, a worker that outlived --shutdown_timeout). The
// launcher never links a debugger: it runs the tools as child processes, one
// chain per rank, at most max_running tools at once (the ranks in order), the
// whole dump bounded by timeout_s:
//  - Python frames: `py-spy dump --pid P` (PyPI py-spy), for a target whose
//    executable is a Python interpreter (is_python_process), when py-spy is
//    on PATH;
//  - native frames: `ddp-stack P` (launcher/stack/: libdw, installed beside
//    ddp-launch), then `eu-stack -p P` (elfutils) only if ddp-stack was not
//    built or found no frame; gdb (`gdb -p P -batch -ex 'thread apply all
//    bt'`) only where neither exists: seconds a rank against tens of
//    milliseconds (docs/architecture.md).
// Each rank's output goes to <dir>/stacks.<tag>.rank_<rank>.txt (0600). A
// tool that is missing or fails is one line in `note` (what to install, or
// its first error line); what the other tool found is still dumped. A tool
// still running at the deadline is SIGKILLed and its target sent SIGCONT (a
// tracer killed between attach and detach could leave it stopped); a step
// not started by then is a note. The tools attach, read and detach: a target
// is paused for the read, never stopped for good or killed. Called from the
// launcher's main thread (the tools' death signal is tied to it); waits only
// for its own children (pidfds), never reaps a worker.

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
  std::string ddp_stack;  // ours, beside ddp-launch
};
// Looks py-spy, eu-stack and gdb up in `path_env` (a PATH value), and
// ddp-stack beside this executable (program_beside_self).
StackTools find_stack_tools(const std::string& path_env);

// Whether /proc/<pid>/exe is a Python interpreter (its name starts with "python").
bool is_python_process(pid_t pid);

// How many tools run at once by default: one a core (each is a single
// CPU-bound process), at least 2, at most 16. 64 ranks at once would be 64
// tracers loading LibTorch's symbols on 2 cores (and 64 gdb of ~60 MB each).
int default_stack_tools_running();

// Dumps every target into `dir` (which must exist), with the tools found on
// this process's PATH (find_stack_tools), resp. the given ones, at most
// max_running tools at once (0: default_stack_tools_running()). Returns one
// entry per target, in the targets' order, within about timeout_s.
std::vector<RankStacks> dump_stacks(const std::vector<StackTarget>& targets, const std::string& dir,
                                    const std::string& tag, double timeout_s);
std::vector<RankStacks> dump_stacks(const std::vector<StackTarget>& targets, const std::string& dir,
                                    const std::string& tag, double timeout_s, const StackTools& tools,
                                    int max_running = 0);

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
