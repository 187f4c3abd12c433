#pragma once
// PeerFailure: the error a rank raises because another rank failed (rank 0
// could not save a checkpoint, rank 0's decision threw, another rank's loss
// went non-finite). It carries the rank it follows, so run_main marks its
// torchelastic error file as consequential ("follows_rank" in extraInfo) and
// the launcher's report never names it as the root cause while the rank it
// follows failed too. The message says which rank to look at. Owns nothing.

#include <stdexcept>
#include <string>

namespace ddp::worker {

class PeerFailure : public std::runtime_error {
 public:
  PeerFailure(int peer_rank, const std::string& what) : std::runtime_error(what), peer_rank_(peer_rank) {}
  int peer_rank() const { return peer_rank_; }

 private:
  int peer_rank_;
};

}  // namespace ddp::worker
