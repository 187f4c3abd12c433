#pragma once
// The NCCL side of in-place recovery (recovery.h), internal to the runtime.
// A collective whose peer died does not fail under NCCL: it hangs until the
// watchdog's timeout, which then ends the process. So, while an NCCL rank
// advertises recovery, a watch thread reads its heartbeat page and, as soon
// as the launcher writes a newer generation there, aborts the group's
// communicators (ProcessGroupNCCL::abort, ncclCommAbort: NCCL's way to free
// a communicator with a dead peer; its destructor may hang). The collective
// in flight then returns, and the step fails as Gloo's does on a closed
// socket. reform_process_group aborts the old group the same way before it
// drops it. Without NCCL compiled in, nccl_recovery_compiled() is false and
// the rest does nothing.

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "ddp/worker/compat.h"

namespace ddp::worker {

class CollectiveRecorder;

// Whether this runtime was built with the NCCL backend (DDP_WORKER_HAVE_NCCL).
bool nccl_recovery_compiled();

// ncclCommAbort on every communicator of `backend` when it is NCCL; nothing
// otherwise (Gloo's sockets close with the backend). Safe while another
// thread waits in a collective of it: that collective returns.
void abort_nccl(const c10::intrusive_ptr<compat::Backend>& backend);

// Aborts `backend` once the page's requested generation exceeds
// `generation`. Stops (and joins its thread) when destroyed.
class NcclAbortWatch {
 public:
  NcclAbortWatch(c10::intrusive_ptr<compat::Backend> backend, std::shared_ptr<CollectiveRecorder> heartbeat,
                 std::uint64_t generation);
  ~NcclAbortWatch();
  NcclAbortWatch(const NcclAbortWatch&) = delete;
  NcclAbortWatch& operator=(const NcclAbortWatch&) = delete;
  // Whether it aborted the group (the step in flight failed).
  bool fired() const { return fired_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

}  // namespace ddp::worker
