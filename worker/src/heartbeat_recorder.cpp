#include "heartbeat_recorder.h"

#include <iostream>
#include <mutex>
#include <stdexcept>

namespace ddp::worker {

std::mutex& CollectiveRecorder::process_mutex() {
  static std::mutex mu;
  return mu;
}

// The last page attached, kept mapped until the process ends: a group that
// comes after the first is gone finds it again (an inherited page's fd is
// closed once attached), and mark_exiting() writes to it after every group
// is gone.
std::shared_ptr<CollectiveRecorder>& CollectiveRecorder::process_recorder() {
  static std::shared_ptr<CollectiveRecorder> last;
  return last;
}

void CollectiveRecorder::mark_exiting() {
  std::lock_guard<std::mutex> lock(process_mutex());
  if (const auto& last = process_recorder()) last->hb_->mark_exiting();
}

std::shared_ptr<CollectiveRecorder> CollectiveRecorder::attach(const std::string& path, int rank) {
  // Only at process-group initialisation: the lock is never on a collective's path.
  std::lock_guard<std::mutex> lock(process_mutex());
  std::shared_ptr<CollectiveRecorder>& last = process_recorder();
  if (last && last->path() == path) return last;
  if (last && last.use_count() > 1) {  // a live group records there
    std::cerr << "ddp_worker: warning: rank " << rank << ": this process already records its heartbeat in "
              << last->path() << "; the new process group does not record into " << path
              << " (DDP_HEARTBEAT_FILE)" << std::endl;
    return nullptr;
  }
  try {
    last = std::make_shared<CollectiveRecorder>(Heartbeat::attach(path));
    return last;
  } catch (const std::exception& e) {
    std::cerr << "ddp_worker: warning: rank " << rank << ": " << e.what()
              << "; training continues without progress heartbeats (DDP_HEARTBEAT_FILE)" << std::endl;
    return nullptr;
  }
}

}  // namespace ddp::worker
