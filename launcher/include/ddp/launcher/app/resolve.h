#pragma once
// What main does between the command line and the supervisor, as one
// library function with its own tests (tests/launcher/test_resolve.cpp):
// parse the options (and PET_*), count the workers (Slurm, NUMA, GPUs),
// resolve the command, check what would fail late (the master address, the
// master port on node 0, --summary_json's path), make the log directory,
// and decide OMP_NUM_THREADS. main then only prints and supervises, as
// tini's does.

#include "ddp/launcher/config/plan.h"

#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ddp::launcher {

// args: argv[1..]; as_torchrun: called by the name torchrun (torchrun 2.x's
// --use_env). Returns the plan, or nullopt when the command line asked for
// --help or --version (written to `out`). The notes of the resolution
// (--numa_binding's CPUs, the OMP_NUM_THREADS default; the options' own
// notes last, after every check) go to `notes`.
// Throws UsageError naming the value and what to do.
std::optional<LaunchPlan> resolve_launch(const std::vector<std::string>& args, const EnvMap& env, bool as_torchrun,
                                         std::ostream& out, std::ostream& notes);

}  // namespace ddp::launcher
