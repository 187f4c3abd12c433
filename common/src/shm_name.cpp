// The segment name shared by the worker runtime and the launcher (see shm_name.h).

#include "ddp/common/shm_name.h"

#include <cstdlib>

namespace ddp {

namespace {

constexpr std::string_view kSegmentPrefix = "ddp-shm-";

}  // namespace

std::string shm_segment_name_head(std::string_view pid) {
  return "/" + std::string(kSegmentPrefix) + std::string(pid) + "-";
}

std::string shm_segment_name(pid_t pid, unsigned long n) {
  return shm_segment_name_head(std::to_string(pid)) + std::to_string(n);
}

pid_t shm_segment_pid(std::string_view name) {
  if (!name.empty() && name.front() == '/') name.remove_prefix(1);
  if (name.substr(0, kSegmentPrefix.size()) != kSegmentPrefix) return 0;
  const std::string rest(name.substr(kSegmentPrefix.size()));  // strtol reads a terminated string
  const char* digits = rest.c_str();
  char* end = nullptr;
  const long pid = std::strtol(digits, &end, 10);
  if (end == digits || *end != '-' || pid <= 0) return 0;
  return static_cast<pid_t>(pid);
}

}  // namespace ddp
