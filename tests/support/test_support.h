#pragma once
// Helpers for tests that run real processes. Owns child processes it starts
// (killed on destruction if still running). Never sleeps a fixed time: waits
// are on a pidfd or on a polled condition with a deadline.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <sys/types.h>

namespace ddp::test {

// Path of a built binary in build/bin (e.g. bin_path("ddp-launch")).
std::string bin_path(const std::string& name);
// Path of a file in the source tree (e.g. source_path("tests/launcher/scripts/x.sh")).
std::string source_path(const std::string& rel);

// A fresh directory under $TMPDIR, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
 private:
  std::string path_;
};

// A child process with stdout+stderr captured into a file.
class Proc {
 public:
  // env: variables added to (or, with value "\x01unset", removed from) the
  // test's own environment.
  Proc(const std::vector<std::string>& argv,
       const std::map<std::string, std::string>& env = {},
       const std::string& cwd = "");
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  pid_t pid() const { return pid_; }
  // Waits up to timeout_s; returns the shell-style exit code (128+N for
  // signal N), or nullopt on timeout.
  std::optional<int> wait(double timeout_s);
  void signal(int sig);
  std::string output() const;  // what it printed so far
  bool running();

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  std::optional<int> code_;
  std::string out_path_;
};

struct ProcResult {
  int exit_code = -1;       // shell-style; -1 when it timed out (and was killed)
  bool timed_out = false;
  std::string output;
};

// Runs to completion (killed after timeout_s).
ProcResult run(const std::vector<std::string>& argv,
               const std::map<std::string, std::string>& env = {},
               double timeout_s = 120, const std::string& cwd = "");

// Polls `cond` every few milliseconds until true or the deadline; returns its
// last value.
bool wait_until(const std::function<bool()>& cond, double timeout_s);

// A TCP port that was free a moment ago, on every address, for a server the
// test starts next: ddp::pick_free_port (ddp-launch's own pick: random,
// outside the kernel's ephemeral range, so no other process's outgoing
// connection takes it in between, and above Slurm's job ports), never the
// same twice in one process.
int free_port();

// True when a TCP server could listen on `port` on 0.0.0.0 right now.
bool can_listen_on_any(int port);

// Whole file as a string ("" when missing).
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& text, bool executable = false);

// True when /proc/<pid> exists and is not a zombie.
bool pid_alive(pid_t pid);

// This process's environment for one scope: each variable set to its value,
// or unset (nullopt); what was there before comes back on destruction.
// For code under test that reads the environment in process.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars);
  ScopedEnv(const std::string& name, const std::optional<std::string>& value) : ScopedEnv({{name, value}}) {}
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace ddp::test
