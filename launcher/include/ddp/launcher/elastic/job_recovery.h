#pragma once
// c10d: in-place recovery across the nodes of a round, the launcher's side
// of the exchange with its rendezvous helper (the rendezvous' side, one key
// for the job: launcher/rdzv/rendezvous_recovery.cpp). The attempt's
// in-place recovery feature (supervise/features/recovery.cpp) asks for the
// job-wide generation of a rank lost on this node and says when it is back;
// the attempt's rendezvous feature, the one reader of the helper's lines,
// hands over the answers and the other nodes' recoveries (heard()), which
// go to the listening feature. It decides nothing: the feature does. One
// for the run (RunServices::job_recovery); a static run has none.

#include "ddp/launcher/elastic/rdzv_agent.h"

#include <cstdint>
#include <functional>

namespace ddp::launcher {

class RdzvLink;

class JobRecovery {
 public:
  explicit JobRecovery(RdzvLink& agent) : agent_(agent) {}

  // Asks for the generation of global rank `rank`, lost here, within
  // `budget` (--max_restarts): a Recovery or RecoveryRefused event follows.
  void ask(int budget, int rank);
  // This node's recovery of `generation` is over (its rank is back).
  void back(uint64_t generation);
  // The recovery asked for last is given up before it began (a second
  // failure came first): granted or not, it counts not.
  void cancel();
  // One of the helper's events: true when it was a recovery's (and went to
  // the listener, if any).
  bool heard(const RdzvEvent& e);

  using Listener = std::function<void(const RdzvEvent&)>;
  // The attempt's feature, while it lives (an empty one: none).
  void listen(Listener l) { listener_ = std::move(l); }

 private:
  RdzvLink& agent_;
  Listener listener_;
};

}  // namespace ddp::launcher
