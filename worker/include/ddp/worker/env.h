#pragma once
// DistEnv: the torchrun worker environment (what ddp-launch or torchrun sets
// for every rank), read once at start-up. Called by init_process_group and by
// programs that only want to know their rank. Never talks to the network and
// never reads anything but the environment and the legacy --local_rank
// argument.

#include <string>

namespace ddp::worker {

struct DistEnv {
  int rank = 0;              // RANK
  int world_size = 1;        // WORLD_SIZE
  int local_rank = 0;        // LOCAL_RANK, or --local_rank=N / --local-rank=N
  int local_world_size = 1;  // LOCAL_WORLD_SIZE (defaults to WORLD_SIZE when unset)
  std::string master_addr;   // MASTER_ADDR
  int master_port = 0;       // MASTER_PORT
  bool use_agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT (0 when unset)
  // DDP_HEARTBEAT_FILE: this rank's progress heartbeat, made by ddp-launch
  // (ddp/common/heartbeat.h); init_process_group writes to it. Empty: none.
  std::string heartbeat_file;
  // A world of one without a launcher: init_process_group uses an in-memory
  // store instead of MASTER_ADDR:MASTER_PORT (set by single_process()).
  bool standalone = false;

  // Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
  // MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RESTART_COUNT,
  // DDP_HEARTBEAT_FILE.
  // A legacy `--local_rank=N` / `--local-rank=N` (or `--local_rank N`) in argv
  // wins over LOCAL_RANK. Throws std::invalid_argument whose message names
  // the missing variables (all of them, in one message) or the malformed one
  // and says to run under ddp-launch or set it; also checks consistency
  // (RANK < WORLD_SIZE, ...).
  static DistEnv from_environment(int argc = 0, char** argv = nullptr);

  // True when any of RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
  // is set, i.e. a launcher (or the user) meant this process to join a group.
  static bool launched();
  // Rank 0 of 1 on its own, as `python train.py` runs a torchrun script that
  // checks for RANK: for programs that choose to run without a launcher.
  static DistEnv single_process();
};

}  // namespace ddp::worker
