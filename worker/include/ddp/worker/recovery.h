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
// never reads files. Gloo on the CPU, and NCCL on CUDA where the runtime is
// built with NCCL: an NCCL survivor's collective with a dead peer hangs, so
// the group's communicators are aborted (ncclCommAbort) when the launcher
// writes the new generation on its page, and again before the group is
// re-formed (worker/src/nccl_abort.h).

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::worker {

class ProcessGroup;

// DDP_RECOVERY_GENERATION of a rank the launcher brought back; 0 for a rank
// started with its group. Throws std::invalid_argument for a bad value.
std::uint64_t recovery_generation_at_start();

// How long a rank whose collective failed waits for the launcher's new
// generation before the failure stands: DDP_RECOVERY_WAIT_S, which the
// launcher sets where noticing the loss takes longer than a dead process
// (a node lost whole, which a hot spare replaces: the rendezvous' keep-alive
// timeout), else 5 s. Throws std::invalid_argument for a bad value.
std::chrono::milliseconds recovery_wait();

// Whether this rank can take part in an in-place recovery: the launcher
// offers it (DDP_RECOVERY=in_place), its store outlives every rank (the
// launcher's), it has a heartbeat page, and recovery_backend_supported.
bool recovery_possible(const ProcessGroup& pg);

// Whether a group of `backend` ("gloo", "nccl") on CUDA or the CPU can be
// re-formed in place: Gloo on the CPU; NCCL on CUDA when it is compiled in.
bool recovery_backend_supported(const std::string& backend, bool cuda);

// Whether the group's collectives were cut short for a recovery (an NCCL
// group aborted on the launcher's word): the step in flight failed, even
// where a collective returned.
bool group_interrupted(const ProcessGroup& pg);

// Writes recovery_capable on the rank's heartbeat page (none: nothing). An
// NCCL group that advertises starts watching its page (nccl_abort.h).
void advertise_recovery(ProcessGroup& pg, bool capable);

// The generation the launcher last wrote on this rank's page; 0: none.
std::uint64_t requested_generation(const ProcessGroup& pg);

// The generation the group was formed under (0: its first).
std::uint64_t group_generation(const ProcessGroup& pg);

// Re-forms `pg` under `generation`: a new store prefix, a new Gloo or NCCL
// backend and new shared-memory sums, with every rank (the returning one
// joins through init_process_group). The old backend is aborted (NCCL)
// and dropped first. Throws
// std::runtime_error as init_process_group does.
void reform_process_group(ProcessGroup& pg, std::uint64_t generation);

// Every rank's `mine` under `key` in the group's store, by rank: the ranks
// agree on something without a collective (the step to redo).
std::vector<std::string> exchange_through_store(ProcessGroup& pg, const std::string& key, const std::string& mine);

}  // namespace ddp::worker
