#pragma once
// Where one attempt's workers sit: the port, restart count and node
// placement they are told (worker_env.h's GroupSpec takes them), and how
// this node is named in messages to other nodes. Static rendezvous fills it
// from the options (the Supervisor), a c10d round from the rendezvous
// (elastic_run.h's RoundPlacement is one). Plain data: no service, no
// process.

#include "ddp/launcher/config/worker_env.h"

#include <optional>
#include <string>

namespace ddp::launcher {

struct Placement {
  int port = 0;           // MASTER_PORT
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
  // The launcher hosts the workers' store at the port
  // (TORCHELASTIC_USE_AGENT_STORE=True; workers_store.h).
  bool agent_store = false;
  // A c10d round's; without one, static_placement() of the options.
  std::optional<NodePlacement> placement;
  std::string node;  // c10d: "node n1 (pid P, host h)" in messages to other nodes
  // c10d: this node, a hot spare, took a lost node's place in the running
  // round (--recovery in_place): its ranks return under this generation (0:
  // a round's start), after `recovery_used` restarts and recoveries of the job.
  uint64_t recovery_generation = 0;
  int recovery_used = 0;
};

}  // namespace ddp::launcher
