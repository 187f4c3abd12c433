#pragma once
// What the stack-dump scenarios need to know of the machine: the dump
// files a launcher wrote, whether eu-stack/gdb/py-spy are there. Header-only
// helpers for tests/launcher (test_stack_scenarios.cpp, test_stall_scenarios.cpp).

#include "test_support.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace ddp::test {

namespace fs = std::filesystem;

// Files named stacks.*.rank_<rank>.txt anywhere under dir.
inline std::vector<std::string> stack_files(const std::string& dir, int rank) {
  std::vector<std::string> out;
  const std::string tail = ".rank_" + std::to_string(rank) + ".txt";
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename();
    if (name.rfind("stacks.", 0) == 0 && name.size() > tail.size() &&
        name.compare(name.size() - tail.size(), tail.size(), tail) == 0)
      out.push_back(e.path());
  }
  return out;
}

// `name` in a PATH value, "" when not there.
inline std::string on_path(const std::string& path, const std::string& name) {
  std::istringstream in(path);
  for (std::string dir; std::getline(in, dir, ':');)
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  return "";
}

inline std::string test_path() {
  const char* p = std::getenv("PATH");
  return p ? p : "";
}

// ddp-stack beside the launcher (build/bin), eu-stack or gdb on PATH.
inline bool has_native_tool(const std::string& path) {
  return ::access(bin_path("ddp-stack").c_str(), X_OK) == 0 || !on_path(path, "eu-stack").empty() ||
         !on_path(path, "gdb").empty();
}

// py-spy's directory: on PATH, else where scripts/install-py-spy puts it.
inline std::string py_spy_dir() {
  const std::string found = on_path(test_path(), "py-spy");
  if (!found.empty()) return fs::path(found).parent_path();
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = (xdg && *xdg ? std::string(xdg) : std::string(home ? home : "") + "/.cache") +
                          "/ddp-launch/py-spy/venv/bin";
  return ::access((dir + "/py-spy").c_str(), X_OK) == 0 ? dir : "";
}

}  // namespace ddp::test
