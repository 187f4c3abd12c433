#include "ddp/launcher/base/own_programs.h"

#include <unistd.h>

namespace ddp::launcher {

std::string program_beside_self(const std::string& name) {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  const std::string self = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  const auto slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/" + name;
}

}  // namespace ddp::launcher
