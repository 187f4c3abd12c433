#include "ddp/worker/env.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/common/parse.h"

namespace ddp::worker {
namespace {

const char* const kHint = "run the program under ddp-launch (or torchrun), or set it";

[[noreturn]] void bad_env(const std::string& var, const std::string& problem,
                          const std::string& meaning) {
  throw std::invalid_argument(var + " " + problem + ": " + kHint + " to " + meaning);
}

int required_int(const char* var, long long lo, long long hi, const std::string& meaning) {
  auto v = get_env(var);
  if (!v) bad_env(var, "is not set", meaning);
  try {
    return static_cast<int>(parse_int(*v, var, lo, hi));
  } catch (const std::invalid_argument& e) {
    // parse_int already names the variable and the value ("RANK: 'x' is not an integer").
    throw std::invalid_argument(std::string(e.what()) + ": " + kHint + " to " + meaning);
  }
}

// The legacy launcher passes --local_rank=N (1.x) or --local-rank=N (2.x);
// argparse also accepts the value as the next argument.
std::optional<int> local_rank_from_argv(int argc, char** argv) {
  if (!argv) return std::nullopt;
  for (int i = 1; i < argc; ++i) {
    if (!argv[i]) continue;
    std::string a = argv[i];
    for (const std::string flag : {"--local_rank", "--local-rank"}) {
      std::string text;
      if (a.rfind(flag + "=", 0) == 0) {
        text = a.substr(flag.size() + 1);
      } else if (a == flag) {
        if (i + 1 >= argc || !argv[i + 1])
          throw std::invalid_argument(flag + " needs a value (--local_rank=N)");
        text = argv[i + 1];
      } else {
        continue;
      }
      return static_cast<int>(parse_int(text, flag, 0, 1 << 20));
    }
  }
  return std::nullopt;
}

const char* const kLaunchVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"};

// Two or more required variables unset: one message naming all of them
// (one at a time would take a run per variable to find them all).
void check_all_set(int argc, char** argv) {
  std::vector<std::string> missing;
  for (const char* var : kLaunchVars) {
    if (std::string(var) == "LOCAL_RANK" && local_rank_from_argv(argc, argv)) continue;
    if (!get_env(var)) missing.push_back(var);
  }
  if (missing.size() < 2) return;  // a single one gets its own, more specific message
  std::string list;
  for (std::size_t i = 0; i < missing.size(); ++i)
    list += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  throw std::invalid_argument(list + " are not set: run the program under ddp-launch (or torchrun), or set "
                              "them (RANK and WORLD_SIZE: this process's rank and the number of processes, "
                              "LOCAL_RANK: its rank on this node, MASTER_ADDR:MASTER_PORT: rank 0's "
                              "rendezvous store)");
}

}  // namespace

bool DistEnv::launched() {
  for (const char* var : kLaunchVars)
    if (get_env(var)) return true;
  return false;
}

DistEnv DistEnv::single_process() {
  DistEnv e;
  e.standalone = true;
  return e;
}

DistEnv DistEnv::from_environment(int argc, char** argv) {
  constexpr long long kMaxRanks = 1 << 20;
  check_all_set(argc, argv);
  DistEnv e;
  e.world_size = required_int("WORLD_SIZE", 1, kMaxRanks, "the total number of processes");
  e.rank = required_int("RANK", 0, kMaxRanks - 1, "this process's global rank (0 <= RANK < WORLD_SIZE)");
  if (e.rank >= e.world_size)
    bad_env("RANK", "is " + std::to_string(e.rank) + " but WORLD_SIZE is " +
                        std::to_string(e.world_size),
            "a value in [0, WORLD_SIZE)");

  if (auto lr = local_rank_from_argv(argc, argv)) {
    e.local_rank = *lr;
  } else {
    e.local_rank = required_int("LOCAL_RANK", 0, kMaxRanks - 1,
                                "this process's rank on its node (or pass --local_rank=N)");
  }
  // The pre-elastic launcher did not set LOCAL_WORLD_SIZE; Python does not
  // need it either, so it is optional.
  if (get_env("LOCAL_WORLD_SIZE")) {
    e.local_world_size = required_int("LOCAL_WORLD_SIZE", 1, kMaxRanks, "the number of processes on this node");
    if (e.local_rank >= e.local_world_size)
      bad_env("LOCAL_RANK", "is " + std::to_string(e.local_rank) + " but LOCAL_WORLD_SIZE is " +
                                std::to_string(e.local_world_size),
              "a value in [0, LOCAL_WORLD_SIZE)");
  } else {
    e.local_world_size = e.world_size;
  }

  auto addr = get_env("MASTER_ADDR");
  if (!addr) bad_env("MASTER_ADDR", "is not set", "the host of rank 0's rendezvous store (e.g. 127.0.0.1)");
  if (addr->empty()) bad_env("MASTER_ADDR", "is empty", "the host of rank 0's rendezvous store (e.g. 127.0.0.1)");
  e.master_addr = *addr;
  e.master_port = required_int("MASTER_PORT", 1, 65535, "the TCP port of the rendezvous store (1-65535)");

  // Python compares with the exact string "True" (rendezvous.py); anything
  // but True/False/empty is a typo we refuse rather than silently read as false.
  if (auto agent = get_env("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*agent == "True") e.use_agent_store = true;
    else if (*agent == "False" || agent->empty()) e.use_agent_store = false;
    else
      bad_env("TORCHELASTIC_USE_AGENT_STORE", "is '" + *agent + "', expected True or False",
              "True only when the launcher hosts the store");
  }
  if (get_env("TORCHELASTIC_RESTART_COUNT")) {
    e.restart_count = required_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30, "the launcher's restart count");
  } else if (e.use_agent_store) {
    // The agent's store keys are scoped per attempt; without the count we
    // would wait on keys nobody writes.
    bad_env("TORCHELASTIC_RESTART_COUNT", "is not set but TORCHELASTIC_USE_AGENT_STORE=True",
            "the launcher's restart count");
  }
  // Not checked here: a heartbeat that cannot be attached is a warning, not
  // an error (init_process_group, heartbeat_recorder.h).
  if (auto hb = get_env("DDP_HEARTBEAT_FILE")) e.heartbeat_file = *hb;
  return e;
}

}  // namespace ddp::worker
