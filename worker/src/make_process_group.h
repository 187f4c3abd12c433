#pragma once
// The one constructor of a ProcessGroup (env_rendezvous.cpp), internal to the
// runtime: init_process_group() calls it with the torchrun rendezvous, and
// run_ranks_in_process() (in_process.h) with the in-memory store its threads
// share. make_gloo is the backend it makes, also made later by
// host_allreduce_async beside an NCCL group (process_group.cpp).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ddp/worker/compat.h"
#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"

namespace ddp::worker {

// `shared_store` null: connect to (or host) the TCPStore of `env`, or an
// in-memory store of one's own when env.standalone. Otherwise every rank
// passes the same store and no shared-memory sums are negotiated.
// `generation`: the in-place recovery generation whose store prefix the
// group forms under (recovery.h); nullopt: DDP_RECOVERY_GENERATION's, or 0.
std::shared_ptr<ProcessGroup> make_process_group(const DistEnv& env, const InitOptions& options,
                                                 const c10::intrusive_ptr<c10d::Store>& shared_store,
                                                 std::optional<std::uint64_t> generation = std::nullopt);

// A Gloo backend over `store` for env's rank and world size, on the devices
// Python's ProcessGroupGloo binding picks (GLOO_SOCKET_IFNAME, else the
// default). Collective: every rank of the group makes it at the same point.
c10::intrusive_ptr<compat::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const DistEnv& env,
                                              std::chrono::milliseconds timeout);

}  // namespace ddp::worker
