#pragma once
// The one place that knows the differences between LibTorch 1.13 (Debian) and
// LibTorch 2.x (the Python wheels on GPU machines). Everything else in the
// worker runtime uses the names defined here and never tests
// TORCH_VERSION_MAJOR itself. Included only by the runtime's .cpp files and by
// code that wants the raw c10d objects (process_group_native.h): it pulls in
// the c10d and Gloo headers, which need USE_C10D_GLOO (a PUBLIC definition of
// the ddp_worker target).

#include <torch/version.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#define DDP_TORCH_VERSION_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||              \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace ddp::worker::compat {

// The class a concrete backend (ProcessGroupGloo, ProcessGroupNCCL) derives
// from. In 1.13 that is c10d::ProcessGroup; in 2.x ProcessGroup became a
// dispatching wrapper and backends derive from c10d::Backend. Calling the
// collectives directly on the backend object works on both.
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

using Work = c10d::Work;

// TCPStoreOptions gained fields in 2.x (useLibUV, masterListenFd); fields are
// set by name so the common ones mean the same on both.
inline c10d::TCPStoreOptions tcp_store_options(std::uint16_t port, bool is_server,
                                               std::optional<std::size_t> num_workers,
                                               bool wait_workers,
                                               std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = port;
  o.isServer = is_server;
  if (num_workers) o.numWorkers = *num_workers;
  o.waitWorkers = wait_workers;
  o.timeout = timeout;
  // Python's env:// rendezvous passes multi_tenant=True; matching it lets a
  // second store on the same address reuse the server in this process.
  o.multiTenant = true;
#if DDP_TORCH_VERSION_AT_LEAST(2, 4)
  // libuv became the default server in 2.4; keep the classic one so both
  // versions behave the same in our timeouts and messages.
  o.useLibUV = false;
#endif
  return o;
}

// Gloo options: the field layout is the same in both versions.
using GlooOptions = c10d::ProcessGroupGloo::Options;

}  // namespace ddp::worker::compat
