#include "ddp/launcher/config/flight_recorder_env.h"

namespace ddp::launcher {

namespace {

constexpr const char* kDumpFile = "TORCH_FR_DUMP_TEMP_FILE";
constexpr const char* kDumpFileOld = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";
constexpr const char* kDumpOnTimeout = "TORCH_NCCL_DUMP_ON_TIMEOUT";

bool has(const EnvMap& env, const char* name) { return env.find(name) != env.end(); }

}  // namespace

void set_flight_recorder_env(EnvMap& env, const EnvMap& parent, const std::string& prefix) {
  if (prefix.empty()) return;
  if (!has(parent, kDumpFile) && !has(parent, kDumpFileOld)) env[kDumpFile] = prefix;
  if (!has(parent, kDumpOnTimeout)) env[kDumpOnTimeout] = "1";
}

std::string flight_recorder_prefix(const EnvMap& parent, const std::string& ours) {
  if (auto it = parent.find(kDumpFile); it != parent.end()) return it->second;
  if (auto it = parent.find(kDumpFileOld); it != parent.end()) return it->second;
  return ours;
}

}  // namespace ddp::launcher
