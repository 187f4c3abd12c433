#pragma once
// In-place recovery, the runtime's part (docs/worker-runtime.md, "In-place
// recovery"). When ddp-launch brings back one lost rank instead of
// restarting the group (--recovery in_place), the survivors and the
// returning rank meet again here: the launcher writes the new generation G
// into each survivor's heartbeat page and starts the lost rank with
// DDP_RECOVERY_GENERATION=G; every rank then re-forms its process group
// under the store prefix of generation G, on the launcher-hosted workers'
// store (TORCHELASTIC_USE_AGENT_STORE=True), which outlives every rank. The
// training loop (ddp/loop) decides what state moves; this file only reads
// and writes the page's recovery fields and swaps the group's backend. It
// never reads files. Gloo on the CPU only: an NCCL group is not re-formed
// (its communicator abort is left out), so such a rank never advertises.

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::worker {

class ProcessGroup;

// DDP_RECOVERY_GENERATION of a rank the launcher brought back; 0 for a rank
// started with its group. Throws std::invalid_argument for a bad value.
std::uint64_t recovery_generation_at_start();

// Whether this rank can take part in an in-place recovery: the launcher
// offers it (DDP_RECOVERY=in_place), its store outlives every rank (the
// launcher's), it has a heartbeat page, and the group is Gloo on the CPU.
bool recovery_possible(const ProcessGroup& pg);

// Writes recovery_capable on the rank's heartbeat page (none: nothing).
void advertise_recovery(ProcessGroup& pg, bool capable);

// The generation the launcher last wrote on this rank's page; 0: none.
std::uint64_t requested_generation(const ProcessGroup& pg);

// The generation the group was formed under (0: its first).
std::uint64_t group_generation(const ProcessGroup& pg);

// Re-forms `pg` under `generation`: a new store prefix, a new Gloo backend
// and new shared-memory sums, with every rank (the returning one joins
// through init_process_group). The old backend is dropped first. Throws
// std::runtime_error as init_process_group does.
void reform_process_group(ProcessGroup& pg, std::uint64_t generation);

// Every rank's `mine` under `key` in the group's store, by rank: the ranks
// agree on something without a collective (the step to redo).
std::vector<std::string> exchange_through_store(ProcessGroup& pg, const std::string& key, const std::string& mine);

}  // namespace ddp::worker
