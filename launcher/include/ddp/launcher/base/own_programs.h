#pragma once
// The helper programs installed beside ddp-launch (ddp-rdzv, ddp-stack): found
// next to the running executable, so a build tree, an install prefix and a
// wheel's scripts folder all work without PATH.

#include <string>

namespace ddp::launcher {

// <directory of /proc/self/exe>/<name> ("./<name>" when that cannot be read).
std::string program_beside_self(const std::string& name);

}  // namespace ddp::launcher
