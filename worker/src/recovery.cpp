#include "ddp/worker/recovery.h"

#include <cstdlib>
#include <stdexcept>

#include "ddp/common/parse.h"
#include "make_process_group.h"
#include "process_group_impl.h"

namespace ddp::worker {

namespace {

std::string recovery_text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

}  // namespace

std::uint64_t recovery_generation_at_start() {
  const char* v = std::getenv("DDP_RECOVERY_GENERATION");
  if (v == nullptr || *v == '\0') return 0;
  return static_cast<std::uint64_t>(ddp::parse_int(v, "DDP_RECOVERY_GENERATION", 1, 1000000000));
}

bool recovery_possible(const ProcessGroup& pg) {
  auto& impl = ProcessGroupAccess::impl(const_cast<ProcessGroup&>(pg));
  const char* offered = std::getenv("DDP_RECOVERY");
  return offered != nullptr && std::string(offered) == "in_place" && impl.env.use_agent_store && impl.heartbeat &&
         impl.backend_name == "gloo" && impl.device.is_cpu() && impl.env.world_size > 1;
}

void advertise_recovery(ProcessGroup& pg, bool capable) {
  auto& impl = ProcessGroupAccess::impl(pg);
  if (impl.heartbeat) impl.heartbeat->page().set_recovery_capable(capable);
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
  // and its shared-memory sums a mapping the new group replaces.
  impl.shm.reset();
  impl.host_backend.reset();
  impl.backend.reset();
  std::shared_ptr<ProcessGroup> fresh = make_process_group(env, options, {}, generation);
  std::swap(ProcessGroupAccess::impl_ptr(pg), ProcessGroupAccess::impl_ptr(*fresh));
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
