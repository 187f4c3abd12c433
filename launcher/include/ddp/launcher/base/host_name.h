#pragma once
// This machine's name as messages, events and the summary print it.

#include <string>

namespace ddp::launcher {

// gethostname(2); "" when it fails.
std::string host_name();

}  // namespace ddp::launcher
