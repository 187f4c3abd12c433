#pragma once
// The one-line UsageError that parse_launch_options gives for args/env, or
// "<no error>" when it accepts them: how the option tests read messages.
#include "ddp/launcher/config/options.h"

#include <string>
#include <vector>

namespace ddp::test {

inline std::string usage_message(const std::vector<std::string>& args, const launcher::EnvMap& env = {}) {
  try {
    launcher::parse_launch_options(args, env);
  } catch (const launcher::UsageError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace ddp::test
