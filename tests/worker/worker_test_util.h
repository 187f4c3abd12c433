#pragma once
// Spawning the ranks of a small job for the worker tests: one
// ddp-worker-test-helper process per rank with the torchrun environment,
// bounded by a timeout. Owns the processes it starts (Proc kills leftovers).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_support.h"

namespace ddp::test {

struct RankRun {
  int exit_code = -1;  // -1: timed out (and killed)
  std::string output;
};

inline std::string helper_path() { return bin_path("ddp-worker-test-helper"); }

inline std::map<std::string, std::string> rank_env(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_USE_AGENT_STORE", "False"},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"OMP_NUM_THREADS", "1"},
          // Short enough that a broken test fails fast, long enough for a
          // loaded 2-core machine.
          {"DDP_TIMEOUT_S", "60"}};
}

// argv_for(rank) gives each rank's command line (default: the helper with args).
inline std::vector<RankRun> run_ranks(int world, const std::vector<std::string>& args,
                                      const std::map<std::string, std::string>& extra_env = {},
                                      double timeout_s = 90) {
  const int port = free_port();
  std::vector<std::unique_ptr<Proc>> procs;
  for (int r = 0; r < world; ++r) {
    auto env = rank_env(r, world, port);
    for (const auto& [k, v] : extra_env) env[k] = v;
    std::vector<std::string> argv{helper_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    procs.push_back(std::make_unique<Proc>(argv, env));
  }
  std::vector<RankRun> out(world);
  for (int r = 0; r < world; ++r) {
    auto code = procs[r]->wait(timeout_s);
    out[r].exit_code = code ? *code : -1;
    out[r].output = procs[r]->output();
  }
  return out;
}

}  // namespace ddp::test
