#include "nccl_abort.h"

#include <chrono>

#include "heartbeat_recorder.h"

#ifdef DDP_WORKER_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddp::worker {

bool nccl_recovery_compiled() {
#ifdef DDP_WORKER_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

void abort_nccl(const c10::intrusive_ptr<compat::Backend>& backend) {
#ifdef DDP_WORKER_HAVE_NCCL
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(backend.get())) nccl->abort();
#else
  (void)backend;
#endif
}

NcclAbortWatch::NcclAbortWatch(c10::intrusive_ptr<compat::Backend> backend,
                               std::shared_ptr<CollectiveRecorder> heartbeat, std::uint64_t generation) {
  thread_ = std::thread([this, backend = std::move(backend), heartbeat = std::move(heartbeat), generation] {
    // The page is this process's own mapping: a read every 2 ms costs
    // nothing next to a step, and the survivor leaves within milliseconds
    // of the launcher's word.
    while (!stop_.load()) {
      if (heartbeat->page().recovery_generation() > generation) {
        fired_.store(true);
        abort_nccl(backend);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
}

NcclAbortWatch::~NcclAbortWatch() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

}  // namespace ddp::worker
