#include "unwind.h"

#include <elfutils/libdwfl.h>

#include <cxxabi.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace ddp::stack {

namespace {

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

std::string dwfl_error() {
  const char* msg = dwfl_errmsg(-1);
  return msg ? msg : "unknown libdw error";
}

struct ThreadWalk {
  ThreadStack* out;
  int max_frames;
};

int on_frame(Dwfl_Frame* state, void* arg) {
  auto* walk = static_cast<ThreadWalk*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(state, &pc, &activation)) {
    walk->out->error = dwfl_error();
    return DWARF_CB_ABORT;
  }
  // A return address points after its call: look the caller's name up one
  // byte back, as eu-stack does (the innermost frame is exact).
  const Dwarf_Addr lookup = activation ? pc : pc - 1;
  Frame f;
  f.pc = pc;
  if (Dwfl_Module* mod = dwfl_addrmodule(dwfl_thread_dwfl(dwfl_frame_thread(state)), lookup))
    if (const char* name = dwfl_module_addrname(mod, lookup)) f.symbol = demangle(name);
  walk->out->frames.push_back(std::move(f));
  return static_cast<int>(walk->out->frames.size()) >= walk->max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

struct ProcessWalk {
  ProcessStack* out;
  int max_frames;
};

int on_thread(Dwfl_Thread* thread, void* arg) {
  auto* walk = static_cast<ProcessWalk*>(arg);
  walk->out->threads.push_back(ThreadStack{dwfl_thread_tid(thread), {}, {}});
  ThreadStack& t = walk->out->threads.back();
  ThreadWalk tw{&t, walk->max_frames};
  // -1 ends most walks: the outermost frame has no caller to unwind to.
  // An error is worth saying only when it came before any frame.
  if (dwfl_thread_getframes(thread, on_frame, &tw) != 0 && t.frames.empty() && t.error.empty())
    t.error = dwfl_error();
  return DWARF_CB_OK;
}

}  // namespace

ProcessStack unwind_process(pid_t pid, int max_frames) {
  ProcessStack out;
  out.pid = pid;
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr,
                                           &debuginfo_path};
  std::unique_ptr<Dwfl, decltype(&dwfl_end)> dwfl(dwfl_begin(&callbacks), &dwfl_end);
  if (!dwfl) {
    out.error = dwfl_error();
    return out;
  }
  dwfl_report_begin(dwfl.get());
  const int reported = dwfl_linux_proc_report(dwfl.get(), pid);
  if (reported != 0) {
    if (reported == ENOENT) out.error = "no process " + std::to_string(pid) + " (it has exited, or never was)";
    else if (reported > 0) out.error = "cannot read /proc/" + std::to_string(pid) + "/maps: " + std::strerror(reported);
    else out.error = dwfl_error();
    return out;
  }
  if (dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0) {
    out.error = dwfl_error();
    return out;
  }
  const int attached = dwfl_linux_proc_attach(dwfl.get(), pid, false);
  if (attached != 0) {
    out.error = attached > 0 ? std::string("cannot attach to ") + std::to_string(pid) + ": " + std::strerror(attached)
                             : dwfl_error();
    return out;
  }
  ProcessWalk walk{&out, max_frames};
  if (dwfl_getthreads(dwfl.get(), on_thread, &walk) != 0 && out.threads.empty()) out.error = dwfl_error();
  return out;  // dwfl_end detaches from every thread
}

std::string eu_stack_text(const ProcessStack& stack) {
  std::string s = "PID " + std::to_string(stack.pid) + " - process\n";
  for (const ThreadStack& t : stack.threads) {
    s += "TID " + std::to_string(t.tid) + ":\n";
    for (size_t i = 0; i < t.frames.size(); ++i) {
      char head[48];
      std::snprintf(head, sizeof(head), "#%-2zu 0x%016" PRIx64, i, t.frames[i].pc);
      s += head;
      if (!t.frames[i].symbol.empty()) s += " " + t.frames[i].symbol;
      s += "\n";
    }
    if (!t.error.empty()) s += (t.frames.empty() ? "(no frames: " : "(unwinding stopped: ") + t.error + ")\n";
  }
  return s;
}

}  // namespace ddp::stack
