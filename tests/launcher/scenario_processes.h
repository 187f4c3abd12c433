#pragma once
// What the launcher's black-box scenarios (test_*_scenarios.cpp) look for
// after a launch with scripts/worker.sh: a rank's pid file, the marker files
// each rank writes, the launcher's run directories, pids going away. It only
// reads; it never starts or signals a process.

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "test_support.h"

namespace ddp::test {

// The pid scripts/worker.sh wrote for `rank` (OUT/pid.RANK).
inline pid_t pid_of(const TempDir& out, int rank) {
  return std::stoi(read_file(out.file("pid." + std::to_string(rank))));
}

// True when OUT/PREFIX.0 .. OUT/PREFIX.(n-1) all exist.
inline bool files_exist(const TempDir& out, const std::string& prefix, int n) {
  for (int r = 0; r < n; ++r)
    if (!std::filesystem::exists(out.file(prefix + "." + std::to_string(r)))) return false;
  return true;
}

// The ddp-launch-* run directories under `dir`.
inline std::vector<std::string> run_dirs_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("ddp-launch-", 0) == 0) out.push_back(e.path());
  return out;
}

// True once none of pids is alive (zombies count as gone), within timeout_s.
inline bool all_gone_within(const std::vector<pid_t>& pids, double timeout_s) {
  return wait_until(
      [&] {
        for (pid_t pid : pids)
          if (pid_alive(pid)) return false;
        return true;
      },
      timeout_s);
}

}  // namespace ddp::test
