// libFuzzer target: the launcher's command line and PET_* environment, as
// main() takes them (options.cpp, invocation.cpp, command.cpp, slurm.cpp's
// resolve_slurm), then the environment of the first and the last worker
// (worker_env.cpp).
// Input: NUL-separated strings. Those before the first empty string are argv
// (argv[0] first); those after it are the environment, NAME=VALUE each.
// E.g. "ddp-launch\0--nproc_per_node\x002\0train.py\0\0PET_NNODES=1".
// Bad input may only end in a UsageError with a one-line, non-empty message;
// any other exception, crash, leak or UB is a bug.

#include "ddp/launcher/config/command.h"
#include "ddp/launcher/config/invocation.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/config/slurm.h"
#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/config/worker_env.h"
#include "fuzz_input.h"

#include <cstdio>
#include <cstdlib>

using namespace ddp::launcher;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = ddp::fuzz::split_nul(data, size);
  std::vector<std::string> argv;
  EnvMap env;
  size_t i = 0;
  for (; i < parts.size() && !parts[i].empty(); ++i) argv.push_back(parts[i]);
  for (++i; i < parts.size(); ++i) {
    const auto eq = parts[i].find('=');
    if (eq != std::string::npos && eq > 0) env[parts[i].substr(0, eq)] = parts[i].substr(eq + 1);
  }
  if (argv.empty()) argv.push_back("ddp-launch");

  LaunchPlan cfg;
  try {
    cfg.opts = parse_launch_options(std::vector<std::string>(argv.begin() + 1, argv.end()), env);
    if (invoked_as_torchrun(argv[0])) cfg.opts.use_env = true;
    if (cfg.opts.help || cfg.opts.version) return 0;
    // What main() does next, minus probing the machine and starting anything.
    cfg.nproc = resolve_nproc(cfg.opts.nproc_spec, HostCounts{4, 2});
    cfg.command = resolve_command(cfg.opts, env);
    resolve_slurm(cfg, env);
    static_placement(cfg.opts, cfg.nproc);
    if (cfg.nproc < 1) std::abort();
    const int last = cfg.opts.task ? cfg.opts.task->local_rank : cfg.nproc - 1;
    if (cfg.opts.virtual_local_rank) virtual_visible_device(env, last, last + 1);
    GroupSpec group;
    group.opts = &cfg.opts;
    group.nproc = cfg.nproc;
    for (int local_rank : {0, cfg.nproc - 1}) {
      (void)cfg.command.argv_for(local_rank);
      const EnvMap worker = worker_environment(env, group, local_rank, "/tmp/error.json");
      if (!worker.count("RANK") || !worker.count("WORLD_SIZE")) std::abort();
      if (std::stoll(worker.at("RANK")) >= std::stoll(worker.at("WORLD_SIZE"))) {
        std::fprintf(stderr, "RANK %s not below WORLD_SIZE %s\n", worker.at("RANK").c_str(), worker.at("WORLD_SIZE").c_str());
        std::abort();
      }
    }
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    if (msg.empty()) {
      std::fprintf(stderr, "UsageError with an empty message\n");
      std::abort();
    }
  }
  return 0;
}
