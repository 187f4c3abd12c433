#pragma once
// ProcessGroup::Impl: what a ProcessGroup holds (process_group.h keeps it
// opaque, so c10d's types stay out of the public header). Filled once by
// make_process_group (env_rendezvous.cpp), then read by the collectives
// (process_group.cpp); host_once/host_backend and the shared-memory object's
// queue are the only parts that change afterwards. Internal to the runtime:
// ProcessGroup keeps its Impl private.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include <c10/core/Device.h>

#include "ddp/worker/compat.h"
#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"
#include "heartbeat_recorder.h"
#include "nccl_abort.h"
#include "shm_allreduce.h"

namespace ddp::worker {

struct ProcessGroup::Impl {
  DistEnv env;
  std::string backend_name;
  c10::Device device{c10::kCPU};
  std::chrono::milliseconds timeout{};
  c10::intrusive_ptr<c10d::Store> tcp_store;  // the TCPStore itself (HashStore when standalone)
  c10::intrusive_ptr<c10d::Store> store;      // PrefixStore("default_pg", ...)
  c10::intrusive_ptr<compat::Backend> backend;
  // Gloo for host_allreduce_async: `backend` itself when it is Gloo, else
  // made on first use.
  std::once_flag host_once;
  c10::intrusive_ptr<compat::Backend> host_backend;
  // Float sums through shared memory when every rank is on this machine.
  std::unique_ptr<ShmAllreduce> shm;
  std::string shm_off_reason;
  InitOptions options;           // what it was made with (a re-formed group is made the same way)
  std::uint64_t generation = 0;  // the in-place recovery generation it formed under (recovery.h)
  // The rank's progress heartbeat (DistEnv::heartbeat_file); null: none.
  std::shared_ptr<CollectiveRecorder> heartbeat;
  // An NCCL rank that advertises in-place recovery: aborts `backend` when
  // the launcher asks for a new generation (nccl_abort.h). Last, so it is
  // stopped first.
  std::unique_ptr<NcclAbortWatch> nccl_watch;
};

// The one door into a ProcessGroup's Impl for the runtime's free functions
// (process_group_native.h's native_backend and native_store, training_step);
// the members use impl_ directly.
struct ProcessGroupAccess {
  static ProcessGroup::Impl& impl(ProcessGroup& pg) { return *pg.impl_; }
  // The group's whole Impl: reform_process_group (recovery.cpp) swaps it.
  static std::unique_ptr<ProcessGroup::Impl>& impl_ptr(ProcessGroup& pg) { return pg.impl_; }
};

}  // namespace ddp::worker
