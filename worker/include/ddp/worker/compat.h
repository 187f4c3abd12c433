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
#include <vector>

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

// A PyTorch version, so that the version-dependent rules below are plain
// functions of it: the build uses them with kLibTorch, and the tests check
// both sides (1.13 and 2.x) in every build.
struct TorchVersion {
  int major;
  int minor;
  constexpr bool at_least(int maj, int min) const { return major > maj || (major == maj && minor >= min); }
};
inline constexpr TorchVersion kLibTorch{TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR};

// How Python's init_process_group scopes the default group's backend keys
// inside PrefixStore("default_pg", store), outermost prefix first. A C++ rank
// must use the same keys to share a group with Python ranks of the same
// version. 1.13 (distributed_c10d.py, _new_process_group_helper):
// PrefixStore(group_name="0", store). 2.x: PrefixStore("<device>/",
// PrefixStore("0/", store)); c10d joins prefix and key with "/", so 2.x keys
// read "0//cpu//<key>". Proven against real Python of each version by the
// interop test (tests/worker/test_process_group.cpp).
inline std::vector<std::string> backend_store_prefixes(TorchVersion v, const std::string& device_type) {
  if (v.major >= 2) return {"0/", device_type + "/"};
  return {"0"};
}

inline c10::intrusive_ptr<c10d::Store> backend_store(const c10::intrusive_ptr<c10d::Store>& default_pg,
                                                     const std::string& device_type,
                                                     TorchVersion v = kLibTorch) {
  c10::intrusive_ptr<c10d::Store> s = default_pg;
  for (const auto& prefix : backend_store_prefixes(v, device_type))
    s = c10::make_intrusive<c10d::PrefixStore>(prefix, s);
  return s;
}

// The key Gloo's full-mesh rendezvous publishes for `rank` in the backend
// store (device 0's context) before it waits for the others, Python ranks
// included; the runtime checks these keys to say which ranks never arrived.
// The Gloo inside LibTorch 1.13 writes "0/rank_<r>", the one inside 2.11
// "0/<r>" (seen in both builds' tests; the 2.x releases in between were not
// checked, so 2.0 and later are taken to write the new key).
inline std::string gloo_rank_key(TorchVersion v, int rank) {
  return (v.major >= 2 ? "0/" : "0/rank_") + std::to_string(rank);
}

// Python 1.x ends init_process_group with a store-based barrier on this key
// (in the default_pg store); a C++ rank in a mixed group must take part or
// the Python ranks wait for it until the timeout. 2.1+ skips it by default
// (TORCH_DIST_INIT_BARRIER=0).
inline std::optional<std::string> init_barrier_key(TorchVersion v = kLibTorch) {
  if (v.at_least(2, 1)) return std::nullopt;
  return std::string("store_based_barrier_key:1");
}

}  // namespace ddp::worker::compat
