#pragma once
// The flight recorder's variables in a worker's environment (what and why:
// diagnose/flight_recorder.h, which lists the dumps they lead to). Pure.

#include "ddp/launcher/config/options.h"

#include <string>

namespace ddp::launcher {

// Sets TORCH_FR_DUMP_TEMP_FILE=<prefix> and TORCH_NCCL_DUMP_ON_TIMEOUT=1 in `env` (a worker's) unless `parent` has them.
// prefix: this attempt's dump prefix; "" sets nothing.
void set_flight_recorder_env(EnvMap& env, const EnvMap& parent, const std::string& prefix);

// The prefix the workers' torch will write to: the parent's value
// (TORCH_FR_DUMP_TEMP_FILE, else TORCH_NCCL_DEBUG_INFO_TEMP_FILE), else `ours`.
std::string flight_recorder_prefix(const EnvMap& parent, const std::string& ours);

}  // namespace ddp::launcher
