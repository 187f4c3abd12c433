#pragma once
// Shared by the launcher's black-box scenarios: the real ddp-launch, the
// shell worker (scripts/worker.sh, driven by $SCENARIO, writing into $OUT),
// and the NAME=value environment dumps workers write.

#include <map>
#include <sstream>
#include <string>

#include "test_support.h"

namespace ddp::test {

inline const std::string& scenario_worker() {
  static const std::string path = source_path("tests/launcher/scripts/worker.sh");
  return path;
}

inline std::string launcher() { return bin_path("ddp-launch"); }

inline std::map<std::string, std::string> scenario_env(const TempDir& out, const std::string& scenario,
                                                       std::map<std::string, std::string> extra = {}) {
  extra["OUT"] = out.path();
  extra["SCENARIO"] = scenario;
  return extra;
}

// NAME=value lines (the first '=' splits; lines without one are skipped).
inline std::map<std::string, std::string> parse_env_dump(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  return env;
}

// The text after "<label> : " on the launcher's report line that has it.
inline std::string report_value(const std::string& output, const std::string& label) {
  const std::string key = label + " : ";
  const auto at = output.find(key);
  if (at == std::string::npos) return "";
  const auto end = output.find('\n', at);
  return output.substr(at + key.size(), end - at - key.size());
}

}  // namespace ddp::test
