#include "heartbeat_recorder.h"

#include <iostream>
#include <mutex>
#include <stdexcept>

namespace ddp::worker {

std::shared_ptr<CollectiveRecorder> CollectiveRecorder::attach(const std::string& path, int rank) {
  // Only at process-group initialisation: the lock is never on a collective's path.
  static std::mutex mu;
  static std::weak_ptr<CollectiveRecorder> current;
  std::lock_guard<std::mutex> lock(mu);
  if (auto live = current.lock()) {
    if (live->path() == path) return live;
    std::cerr << "ddp_worker: warning: rank " << rank << ": this process already records its heartbeat in "
              << live->path() << "; the new process group does not record into " << path
              << " (DDP_HEARTBEAT_FILE)" << std::endl;
    return nullptr;
  }
  try {
    auto rec = std::make_shared<CollectiveRecorder>(Heartbeat::attach(path));
    current = rec;
    return rec;
  } catch (const std::exception& e) {
    std::cerr << "ddp_worker: warning: rank " << rank << ": " << e.what()
              << "; training continues without progress heartbeats (DDP_HEARTBEAT_FILE)" << std::endl;
    return nullptr;
  }
}

}  // namespace ddp::worker
