#include "ddp/launcher/supervise/stack_dumps.h"

#include "ddp/common/duration_text.h"
#include "ddp/launcher/diagnose/stack_dump.h"

#include <algorithm>
#include <cctype>
#include <chrono>

namespace ddp::launcher {

namespace {

// A stack dump of every rank is bounded by this (tools still running then
// are killed); eu-stack takes well under a second for 8 ranks (docs/benchmarks.md).
constexpr double kStackDumpTimeoutS = 5.0;

}  // namespace

bool report_dump_replaces(std::optional<DumpKind> shown, DumpKind next) {
  if (!shown) return true;
  if (*shown == DumpKind::Cause) return false;
  if (next != DumpKind::Live) return true;
  return *shown == DumpKind::Live;
}

std::string StackDumps::dump(const std::string& why, const std::map<pid_t, int>& workers, const std::string& note) {
  std::vector<StackTarget> targets;
  for (const auto& [pid, lr] : workers) targets.push_back(StackTarget{info_.base_rank + lr, lr, pid, is_python_process(pid)});
  if (targets.empty()) return "";
  std::sort(targets.begin(), targets.end(), [](const StackTarget& a, const StackTarget& b) { return a.rank < b.rank; });
  const LaunchPlan& plan = info_.plan;
  std::string dir = info_.dir.path(), tag;
  if (plan.run_log_dir.empty()) {
    info_.dir.keep();
    watchdog_.keep_run_dir();
    tag = "attempt_" + std::to_string(info_.attempt) + ".";
  } else {
    dir = plan.run_log_dir + "/attempt_" + std::to_string(info_.attempt);
  }
  for (char c : why.substr(0, why.find_first_of(" :;,")))
    tag += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  tag += "." + std::to_string(++count_);
  const auto path = plan.parent_env.find("PATH");
  const auto start = std::chrono::steady_clock::now();
  const std::vector<RankStacks> stacks = dump_stacks(targets, dir, tag, kStackDumpTimeoutS,
                                                     find_stack_tools(path == plan.parent_env.end() ? "" : path->second));
  const std::string took = ddp::seconds_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  const std::string ranks = std::to_string(stacks.size()) + (stacks.size() == 1 ? " rank" : " ranks");
  const std::string summary = format_stack_summary(stacks) + (note.empty() ? "" : "  " + note + "\n");
  log_ << "ddp-launch: stacks of " << ranks << " (" << why << ") in " << took << ":\n" << summary << std::flush;
  return "Stacks (" + why + "; " + ranks + ", " + took + "):\n" + summary;
}

}  // namespace ddp::launcher
