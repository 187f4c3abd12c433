#include "ddp/launcher/process/heartbeat_pages.h"

#include <stdexcept>

namespace ddp::launcher {

int HeartbeatPages::create(int local_rank) {
  if (local_rank < 0) return -1;
  if (static_cast<size_t>(local_rank) >= pages_.size()) pages_.resize(static_cast<size_t>(local_rank) + 1);
  try {
    pages_[local_rank] = Heartbeat::create_sealed();
  } catch (const std::runtime_error& e) {
    pages_[local_rank].reset();
    if (!warned_) {
      warned_ = true;
      warning_ = std::string("ddp-launch: warning: ") + e.what() +
                 "; workers without one are watched by CPU time and output only (--stall_timeout)";
    }
    return -1;
  }
  return pages_[local_rank]->fd();
}

void HeartbeatPages::started(int local_rank) {
  if (local_rank >= 0 && static_cast<size_t>(local_rank) < pages_.size() && pages_[local_rank])
    pages_[local_rank]->close_fd();  // the worker has its own; the mapping stays
}

std::shared_ptr<const Heartbeat> HeartbeatPages::page(int local_rank) const {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= pages_.size()) return nullptr;
  return pages_[local_rank];
}

void HeartbeatPages::tell_recovery_generation(int local_rank, uint64_t generation) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= pages_.size() || !pages_[local_rank]) return;
  pages_[local_rank]->set_recovery_generation(generation);
}

std::optional<HeartbeatSnapshot> HeartbeatPages::read(int local_rank) const {
  const std::shared_ptr<const Heartbeat> p = page(local_rank);
  if (!p) return std::nullopt;
  const HeartbeatSnapshot s = p->read();
  if (s.pid == 0) return std::nullopt;
  return s;
}

std::string HeartbeatPages::take_warning() {
  std::string w;
  w.swap(warning_);
  return w;
}

}  // namespace ddp::launcher
