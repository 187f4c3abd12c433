#include "ddp/worker/recovery.h"

#include <csignal>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "ddp/common/parse.h"
#include "make_process_group.h"
#include "nccl_abort.h"
#include "process_group_impl.h"

namespace ddp::worker {

namespace {

std::string recovery_text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// An NCCL group that takes part in recovery watches its page (nccl_abort.h).
void start_nccl_watch(ProcessGroup::Impl& impl, bool capable) {
  if (!capable || impl.backend_name != "nccl" || !impl.heartbeat || impl.nccl_watch) return;
  impl.nccl_watch = std::make_unique<NcclAbortWatch>(impl.backend, impl.heartbeat, impl.generation);
}

}  // namespace

std::uint64_t recovery_generation_at_start() {
  const char* v = std::getenv("DDP_RECOVERY_GENERATION");
  if (v == nullptr || *v == '\0') return 0;
  return static_cast<std::uint64_t>(ddp::parse_int(v, "DDP_RECOVERY_GENERATION", 1, 1000000000));
}

std::chrono::milliseconds recovery_wait() {
  const char* v = std::getenv("DDP_RECOVERY_WAIT_S");
  if (v == nullptr || *v == '\0') return std::chrono::seconds(5);
  const std::optional<double> s = ddp::parse_finite_double(v);
  if (!s || *s <= 0 || *s > 86400)
    throw std::invalid_argument("DDP_RECOVERY_WAIT_S=" + std::string(v) +
                                " is not a wait in seconds in (0, 86400]: set it to a positive number, or unset it");
  return std::chrono::milliseconds(static_cast<long long>(*s * 1000));
}

bool recovery_possible(const ProcessGroup& pg) {
  auto& impl = ProcessGroupAccess::impl(const_cast<ProcessGroup&>(pg));
  const char* offered = std::getenv("DDP_RECOVERY");
  return offered != nullptr && std::string(offered) == "in_place" && impl.env.use_agent_store && impl.heartbeat &&
         recovery_backend_supported(impl.backend_name, impl.device.is_cuda()) && impl.env.world_size > 1;
}

bool recovery_backend_supported(const std::string& backend, bool cuda) {
  if (backend == "gloo") return !cuda;
  return backend == "nccl" && cuda && nccl_recovery_compiled();
}

bool group_interrupted(const ProcessGroup& pg) {
  auto& impl = ProcessGroupAccess::impl(const_cast<ProcessGroup&>(pg));
  return impl.nccl_watch && impl.nccl_watch->fired();
}

void advertise_recovery(ProcessGroup& pg, bool capable) {
  auto& impl = ProcessGroupAccess::impl(pg);
  // A survivor must outlive its peer: Gloo writes to a peer's socket with
  // writev, and a dead peer's socket raises SIGPIPE, which killed survivors
  // (a node lost whole). Ignored, the write fails with EPIPE: a failed
  // collective, which the recovery handles. (Python ignores it at start.)
  if (capable) std::signal(SIGPIPE, SIG_IGN);
  if (impl.heartbeat) impl.heartbeat->page().set_recovery_capable(capable);
  start_nccl_watch(impl, capable);
}

std::uint64_t requested_generation(const ProcessGroup& pg) {
  auto& impl = ProcessGroupAccess::impl(const_cast<ProcessGroup&>(pg));
  return impl.heartbeat ? impl.heartbeat->page().recovery_generation() : 0;
}

std::uint64_t group_generation(const ProcessGroup& pg) {
  return ProcessGroupAccess::impl(const_cast<ProcessGroup&>(pg)).generation;
}

void reform_process_group(ProcessGroup& pg, std::uint64_t generation) {
  auto& impl = ProcessGroupAccess::impl(pg);
  const DistEnv env = impl.env;
  const InitOptions options = impl.options;
  // The old backend goes first: its threads hold sockets to the lost peer
  // and its shared-memory sums a mapping the new group replaces. An NCCL
  // communicator with a dead peer is aborted, never just destroyed.
  const bool watched = impl.nccl_watch != nullptr;
  const bool aborted = watched && impl.nccl_watch->fired();
  impl.nccl_watch.reset();
  if (!aborted) abort_nccl(impl.backend);
  impl.shm.reset();
  impl.host_backend.reset();
  impl.backend.reset();
  std::shared_ptr<ProcessGroup> fresh = make_process_group(env, options, {}, generation);
  std::swap(ProcessGroupAccess::impl_ptr(pg), ProcessGroupAccess::impl_ptr(*fresh));
  start_nccl_watch(ProcessGroupAccess::impl(pg), watched);
}

std::vector<std::string> exchange_through_store(ProcessGroup& pg, const std::string& key, const std::string& mine) {
  auto& impl = ProcessGroupAccess::impl(pg);
  const std::string prefix = "ddp_recovery/" + key + "/";
  impl.store->set(prefix + std::to_string(impl.env.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < impl.env.world_size; ++r) keys.push_back(prefix + std::to_string(r));
  impl.store->wait(keys, impl.timeout);
  std::vector<std::string> all;
  for (const auto& k : keys) all.push_back(recovery_text(impl.store->get(k)));
  return all;
}

}  // namespace ddp::worker
