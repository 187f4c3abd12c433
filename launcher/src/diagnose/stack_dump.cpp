#include "ddp/launcher/diagnose/stack_dump.h"

#include "ddp/common/duration_text.h"
#include "ddp/common/fd_io.h"
#include "ddp/launcher/base/own_programs.h"
#include "ddp/launcher/base/time_text.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/process/spawn.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ddp::launcher {

using Clock = std::chrono::steady_clock;

StackTools find_stack_tools(const std::string& path_env) {
  auto find = [&](const std::string& name) -> std::string {
    std::istringstream in(path_env);
    for (std::string dir; std::getline(in, dir, ':');) {
      if (dir.empty()) continue;
      const std::string p = dir + "/" + name;
      struct stat st;
      if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0) return p;
    }
    return "";
  };
  StackTools tools{find("py-spy"), find("eu-stack"), find("gdb"), program_beside_self("ddp-stack")};
  if (::access(tools.ddp_stack.c_str(), X_OK) != 0) tools.ddp_stack.clear();
  return tools;
}

int default_stack_tools_running() {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<int>(std::clamp<long>(cores, 2, 16));
}

bool is_python_process(pid_t pid) {
  char buf[4096];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  std::string exe(buf, static_cast<size_t>(n));
  exe = exe.substr(exe.rfind('/') + 1);
  return exe.rfind("python", 0) == 0;
}

namespace {

struct Step {
  bool python = false;    // py-spy's Python frames, else native ones
  bool fallback = false;  // run only if the native step before it found no frame
  std::string title;      // "eu-stack -p 42"
  std::string exe;
  std::vector<std::string> args;
};

// One rank's chain of tools, run one after the other (two tracers cannot
// attach to one process at once); the ranks' chains run side by side.
struct Chain {
  StackTarget target;
  RankStacks out;
  int fd = -1;  // the rank's file
  std::vector<Step> steps;
  size_t next = 0;
  // The step running now.
  pid_t tool = -1;
  int pidfd = -1;
  int err = -1;  // its stderr (a memfd)
  off_t from = 0;
  std::string python_text, native_text;
  std::vector<std::string> notes;
};

std::string read_range(int fd, off_t from, off_t to) {
  std::string s(static_cast<size_t>(std::max<off_t>(0, to - from)), '\0');
  s.resize(ddp::fd::pread_full(fd, s.data(), s.size(), from).bytes);
  return s;
}

off_t size_of(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? st.st_size : 0;
}

std::string first_line(const std::string& s) {
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
  return "";
}

std::string tool_name(const Step& s) { return s.exe.substr(s.exe.rfind('/') + 1); }

class Dumper {
 public:
  Dumper(const StackTools& tools, double timeout_s, int max_running)
      : tools_(tools),
        timeout_s_(timeout_s),
        max_running_(max_running > 0 ? max_running : default_stack_tools_running()),
        deadline_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                                          std::chrono::duration<double>(timeout_s))) {
    env_ = current_environment();
    sigemptyset(&no_mask_);  // the tools get every signal, whatever the launcher blocks
    devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  ~Dumper() {
    if (devnull_ >= 0) ::close(devnull_);
  }

  std::vector<RankStacks> run(const std::vector<StackTarget>& targets, const std::string& dir, const std::string& tag) {
    chains_.resize(targets.size());
    for (size_t i = 0; i < targets.size(); ++i) prepare(chains_[i], targets[i], dir, tag);
    fill();
    while (running_ > 0) {
      std::vector<pollfd> fds;
      std::vector<Chain*> owners;
      for (Chain& c : chains_)
        if (c.tool > 0) {
          fds.push_back(pollfd{c.pidfd, POLLIN, 0});
          owners.push_back(&c);
        }
      if (Clock::now() >= deadline_) break;
      const int r = ddp::fd::poll_until(fds.data(), fds.size(), deadline_);
      if (r < 0) break;
      for (size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents != 0) finish_step(*owners[i], false);
      fill();
    }
    // Every overrunning tool is killed first, then each is waited for: the
    // exits of large tracers (gdb with LibTorch's symbols) overlap.
    for (Chain& c : chains_)
      if (c.tool > 0) ::kill(-c.tool, SIGKILL);
    for (Chain& c : chains_) {
      if (c.tool > 0) finish_step(c, true);
      for (; c.next < c.steps.size(); ++c.next)
        if (!(c.steps[c.next].fallback && has_native_frames(c.native_text)))
          c.notes.push_back(tool_name(c.steps[c.next]) + " not run: the dump's " + ddp::seconds_text(timeout_s_) + " were up");
      complete(c);
    }
    std::vector<RankStacks> out;
    for (Chain& c : chains_) out.push_back(c.out);
    return out;
  }

 private:
  void prepare(Chain& c, const StackTarget& t, const std::string& dir, const std::string& tag) {
    c.target = t;
    c.out.rank = t.rank;
    c.out.local_rank = t.local_rank;
    c.out.pid = t.pid;
    const std::string pid = std::to_string(t.pid);
    if (t.python) {
      if (tools_.py_spy.empty()) c.notes.push_back("py-spy is not on PATH: no Python frames (pip install py-spy)");
      else c.steps.push_back({true, false, "Python frames: py-spy dump --pid " + pid, tools_.py_spy, {"dump", "--pid", pid}});
    }
    if (!tools_.ddp_stack.empty())
      c.steps.push_back({false, false, "native frames: ddp-stack " + pid, tools_.ddp_stack, {pid}});
    if (!tools_.eu_stack.empty()) {
      c.steps.push_back({false, !tools_.ddp_stack.empty(), "native frames: eu-stack -p " + pid, tools_.eu_stack,
                         {"-p", pid}});
    } else if (tools_.ddp_stack.empty() && !tools_.gdb.empty()) {
      c.notes.push_back("neither ddp-stack (built with libdw-dev) nor eu-stack (apt-get install elfutils) is here: "
                        "native frames by gdb, which is slower");
      c.steps.push_back({false, false, "native frames: gdb -p " + pid + " -batch -ex 'thread apply all bt'", tools_.gdb,
                         {"-p", pid, "-batch", "-nx", "-ex", "thread apply all bt"}});
    } else if (tools_.ddp_stack.empty()) {
      c.notes.push_back("no ddp-stack (built with libdw-dev), eu-stack or gdb here: no native frames "
                        "(apt-get install elfutils)");
    }
    const std::string path = dir + "/stacks." + tag + ".rank_" + std::to_string(t.rank) + ".txt";
    // Each dump's file is new (<n> counts the dumps): anything at its path
    // was planted there, and is neither followed nor truncated.
    c.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0600);
    if (c.fd < 0) {
      c.notes.push_back("cannot write " + path + ": " + std::strerror(errno));
      c.steps.clear();
      return;
    }
    c.out.file = path;
    ddp::fd::write_all(c.fd, "# ddp-launch: stacks of rank " + std::to_string(t.rank) + " (local_rank " +
                        std::to_string(t.local_rank) + ", pid " + pid + "), " + tag + ", " +
                        format_time(std::chrono::system_clock::now()) + "\n");
  }

  // Starts steps, the ranks in order, while fewer than max_running_ run.
  void fill() {
    for (Chain& c : chains_) {
      if (running_ >= max_running_) return;
      if (c.tool <= 0) start_next(c);
    }
  }

  static bool has_native_frames(const std::string& text) { return text.find("#0") != std::string::npos; }

  void start_next(Chain& c) {
    while (c.next < c.steps.size() && Clock::now() < deadline_) {
      const Step& s = c.steps[c.next++];
      if (s.fallback && has_native_frames(c.native_text)) continue;
      ddp::fd::write_all(c.fd, "== " + s.title + " ==\n");
      c.from = size_of(c.fd);
      c.err = static_cast<int>(::syscall(SYS_memfd_create, "stack-tool-stderr", MFD_CLOEXEC));
      SpawnSpec spec;
      spec.exe = s.exe;
      spec.args = s.args;
      spec.env = env_;
      spec.child_mask = &no_mask_;
      spec.stdin_fd = devnull_;
      spec.stdout_fd = c.fd;
      spec.stderr_fd = c.err >= 0 ? c.err : c.fd;
      try {
        c.tool = spawn_worker(spec);
      } catch (const SpawnError& e) {
        c.notes.push_back("cannot run " + tool_name(s) + ": " + e.what());
        close_err(c);
        continue;
      }
      ++running_;
      c.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, c.tool, 0));
      if (c.pidfd < 0) {  // cannot wait with a deadline: wait for it now (the tools are quick)
        finish_step(c, false);
        continue;
      }
      return;
    }
  }

  // The running step is done, or (overran) is killed now.
  void finish_step(Chain& c, bool overran) {
    const Step& s = c.steps[c.next - 1];
    if (overran) ::kill(-c.tool, SIGKILL);
    int status = 0;
    ddp::fd::retry_eintr([&] { return ::waitpid(c.tool, &status, 0); });
    if (overran) ::kill(c.target.pid, SIGCONT);  // a tracer killed while attached may leave it stopped
    if (c.pidfd >= 0) ::close(c.pidfd);
    c.pidfd = -1;
    c.tool = -1;
    --running_;
    const std::string text = read_range(c.fd, c.from, size_of(c.fd));
    std::string err;
    if (c.err >= 0) {
      err = read_range(c.err, 0, size_of(c.err));
      ddp::fd::write_all(c.fd, err);  // warnings and errors stay in the file too
      close_err(c);
    }
    (s.python ? c.python_text : c.native_text) = text;  // a fallback replaces the text without frames
    const bool has_frames = s.python ? text.find("Thread ") != std::string::npos : has_native_frames(text);
    if (overran) {
      c.notes.push_back(tool_name(s) + " did not finish within " + ddp::seconds_text(timeout_s_) +
                        ": killed (the rank was sent SIGCONT)");
    } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !has_frames) {
      const std::string why = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                  : "exit " + std::to_string(WEXITSTATUS(status));
      std::string line = first_line(err.empty() ? text : err);
      if (line.find("not permitted") != std::string::npos || line.find("Permission denied") != std::string::npos)
        line += " (ptrace is refused: see kernel.yama.ptrace_scope, or CAP_SYS_PTRACE in a container)";
      c.notes.push_back(tool_name(s) + " failed (" + why + ")" + (line.empty() ? "" : ": " + line));
    }
  }

  void close_err(Chain& c) {
    if (c.err >= 0) ::close(c.err);
    c.err = -1;
  }

  void complete(Chain& c) {
    if (c.target.python) c.out.signature = python_signature(c.python_text, c.target.pid);
    if (c.out.signature.empty()) c.out.signature = native_signature(c.native_text, c.target.pid);
    for (const std::string& n : c.notes) c.out.note += (c.out.note.empty() ? "" : "\n") + n;
    if (c.fd >= 0) {
      if (!c.out.note.empty()) ddp::fd::write_all(c.fd, "== notes ==\n" + c.out.note + "\n");
      ::close(c.fd);
    }
  }

  StackTools tools_;
  double timeout_s_;
  int max_running_;
  int running_ = 0;  // tools started and not yet waited for
  Clock::time_point deadline_;
  EnvMap env_;
  sigset_t no_mask_;
  int devnull_ = -1;
  std::vector<Chain> chains_;
};

}  // namespace

std::vector<RankStacks> dump_stacks(const std::vector<StackTarget>& targets, const std::string& dir,
                                    const std::string& tag, double timeout_s, const StackTools& tools,
                                    int max_running) {
  return Dumper(tools, timeout_s, max_running).run(targets, dir, tag);
}

std::vector<RankStacks> dump_stacks(const std::vector<StackTarget>& targets, const std::string& dir,
                                    const std::string& tag, double timeout_s) {
  const EnvMap env = current_environment();
  const auto path = env.find("PATH");
  return dump_stacks(targets, dir, tag, timeout_s, find_stack_tools(path == env.end() ? "" : path->second));
}

}  // namespace ddp::launcher
