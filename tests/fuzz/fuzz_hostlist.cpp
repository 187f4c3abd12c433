// libFuzzer target: the Slurm hostlist and tasks-per-node expanders
// (slurm.cpp). Input: the list text; bytes after the first NUL, if any, are
// also read as a SLURM_TASKS_PER_NODE value.
// Bad input may only end in a UsageError; every name must come out non-empty
// and the count must respect max_hosts.

#include "ddp/launcher/config/slurm.h"
#include "fuzz_input.h"

#include <cstdio>
#include <cstdlib>

using namespace ddp::launcher;

namespace {
[[noreturn]] void fail(const char* what, const std::string& input) {
  std::fprintf(stderr, "%s for '%s'\n", what, input.c_str());
  std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = ddp::fuzz::split_nul(data, size);
  const std::string list = parts.empty() ? "" : parts[0];
  // A small limit too, so the fuzzer reaches the "too many names" paths
  // without building a million strings.
  for (size_t max_hosts : {size_t{64}, size_t{1} << 12}) {
    try {
      const auto hosts = expand_hostlist(list, "SLURM_JOB_NODELIST", max_hosts);
      if (hosts.empty()) fail("no host names and no error", list);
      if (hosts.size() > max_hosts) fail("more names than max_hosts", list);
      for (const auto& h : hosts)
        if (h.empty()) fail("an empty host name", list);
    } catch (const UsageError&) {
    }
  }
  if (parts.size() > 1) {
    try {
      const auto counts = expand_tasks_per_node(parts[1], "SLURM_TASKS_PER_NODE");
      for (int c : counts)
        if (c < 1) fail("a task count below 1", parts[1]);
    } catch (const UsageError&) {
    }
  }
  return 0;
}
