#include "ddp/launcher/config/invocation.h"

namespace ddp::launcher {

bool invoked_as_torchrun(const std::string& argv0) {
  const auto slash = argv0.rfind('/');
  return argv0.compare(slash == std::string::npos ? 0 : slash + 1, std::string::npos, "torchrun") == 0;
}

}  // namespace ddp::launcher
