#pragma once
// The one constructor of a ProcessGroup (process_group.cpp), internal to the
// runtime: init_process_group() calls it with the torchrun rendezvous, and
// run_ranks_in_process() (in_process.h) with the in-memory store its threads
// share.
#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"

namespace ddp::worker {

// `shared_store` null: connect to (or host) the TCPStore of `env`, or an
// in-memory store of one's own when env.standalone. Otherwise every rank
// passes the same store and no shared-memory sums are negotiated.
std::shared_ptr<ProcessGroup> make_process_group(const DistEnv& env, const InitOptions& options,
                                                 const c10::intrusive_ptr<c10d::Store>& shared_store);

}  // namespace ddp::worker
