#pragma once
// c10d: the nodes' windows of steps, exchanged through the rendezvous helper
// (this node's `steps` line out, every node's `job_steps` line back), so that
// the straggler scores of every node compare the ranks of the whole job
// (straggler_scores.h). The one owner of that exchange and of its wire
// text: the step statistics publish() this node's window and read
// others(); the rendezvous feature hands over what the helper said
// (heard()). A static run has none.

#include "ddp/launcher/watch/straggler_scores.h"

#include <string>
#include <vector>

namespace ddp::launcher {

class RdzvLink;

class JobWindows {
 public:
  explicit JobWindows(RdzvLink& agent) : agent_(agent) {}

  // This node's last window (`host`: this node's name) to the other nodes;
  // nothing for an empty window. Their answer comes back through heard().
  void publish(const std::string& host, const std::vector<WindowRank>& local);
  // The helper's JobSteps text (rdzv_agent.h): every node's last window.
  void heard(const std::string& text);
  // Every node's last window as last heard (this node's too); empty before
  // the first answer of the round.
  const std::vector<WindowRank>& others() const { return others_; }
  // A new round: the last round's windows (its ranks were other workers)
  // say nothing of this one's.
  // `world_size`: the round's ranks; a window naming another is dropped.
  void new_round(int world_size) {
    others_.clear();
    world_size_ = world_size;
  }

 private:
  RdzvLink& agent_;
  std::vector<WindowRank> others_;
  int world_size_ = 0;
};

}  // namespace ddp::launcher
