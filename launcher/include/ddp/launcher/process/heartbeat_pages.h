#pragma once
// The heartbeat page of every worker of one attempt (common/heartbeat.h):
// a sealed memfd made before the worker starts, inherited by it alone as the
// fd that DDP_HEARTBEAT_FILE names, and mapped here for the attempt's life.
// The attempt owns it and makes each page before any feature hears of the
// worker; the features read the pages (stalls, step statistics, the exit
// verdict) and never make or close one.

#include "ddp/common/heartbeat.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddp::launcher {

class HeartbeatPages {
 public:
  // Makes the page for this local rank: a sealed memfd no process can
  // truncate. Returns its fd, to be inherited by that worker alone
  // (DDP_HEARTBEAT_FILE=Heartbeat::fd_path(fd)), or -1 when it could not be
  // made (the worker then runs without one; the reason is in
  // take_warning(), said once per attempt).
  int create(int local_rank);
  // The worker of this local rank runs: the launcher's copy of its page's
  // fd is closed (the mapping stays).
  void started(int local_rank);

  // The page of this local rank; null when none was made.
  std::shared_ptr<const Heartbeat> page(int local_rank) const;
  // Its heartbeat; nullopt when there is no page or no worker attached yet.
  std::optional<HeartbeatSnapshot> read(int local_rank) const;
  // In-place recovery: tells the worker of this local rank to re-form its
  // process group under `generation` (the page's recovery_generation). The
  // one field of a page the launcher writes after the worker started.
  void tell_recovery_generation(int local_rank, uint64_t generation);
  // One past the highest local rank a page was asked for.
  int size() const { return static_cast<int>(pages_.size()); }

  std::string take_warning();

 private:
  std::vector<std::shared_ptr<Heartbeat>> pages_;  // by local rank; null: none
  std::string warning_;
  bool warned_ = false;
};

}  // namespace ddp::launcher
