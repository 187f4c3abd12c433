#pragma once
// c10d: rounds of rendezvous and attempts until the job ends on this node.
//  - every attempt starts with a round (node rank, world, the workers'
//    MASTER_ADDR:PORT and restart count come from it; the caller binds a
//    fresh workers' store before each join, node rank 0's is the round's);
//  - a local failure is told to the rendezvous at once (the attempt's
//    rendezvous feature), a reason from it stops healthy workers; either
//    way the round's reason decides: a counted one with restarts left, or an
//    uncounted one (a node waiting to join), rejoins; no restarts left ends
//    the job on every node (abort);
//  - workers that succeed wait at the exit barrier for the round's others;
//  - a hot spare (--hot_spares) waits in its join until a node leaves (then
//    its round says whose place it took) or the job ends without it (then
//    it returns with no attempt and no error).
// The attempts themselves are the caller's (run_attempt): this layer knows
// the rendezvous, not the supervision.

#include "ddp/launcher/config/placement.h"
#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/elastic/rdzv_link.h"
#include "ddp/launcher/process/signals.h"
#include "ddp/launcher/report/report.h"

#include <functional>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace ddp::launcher {

// One round's attempt, as the rendezvous placed this node (placement is
// always set).
struct RoundPlacement : Placement {
  int attempt = 0;
  RdzvLink* agent = nullptr;
};

// A round's replacements as the helper's round line carries them
// ("<node rank>:<host>:<pid>:<host before>:<pid before>", ',' between).
std::vector<NodeReplacement> parse_replacements(const std::string& text);

class ElasticRun {
 public:
  using RunAttempt = std::function<AttemptResult(const RoundPlacement&)>;
  // Before each join: the port of a workers' store the caller has just
  // bound for the coming round (published if this node is its node rank
  // 0), or 0 (the workers' rank 0 hosts it on a port the helper picks).
  using BindStore = std::function<int()>;

  ElasticRun(const LaunchPlan& plan, SignalChannel& signals, std::string host, std::ostream& log);

  // Runs rounds until the job ends on this node; each attempt's result is
  // appended to `attempts`.
  void run(const RunAttempt& run_attempt, std::vector<AttemptResult>& attempts, const BindStore& bind_store = {});

  // The job ended here because the rendezvous failed ("" when it did not).
  const std::string& error() const { return error_; }
  // A launcher signal while waiting on the rendezvous (0 when none).
  int signal() const { return signal_; }

 private:
  std::optional<RdzvEvent> await(RdzvLink& agent, std::initializer_list<RdzvEvent::Kind> kinds);
  // After a failed attempt: false when the job ends on this node.
  bool rejoin(RdzvLink& agent, const RdzvEvent& round, const RoundPlacement& setup, AttemptResult& last);
  std::string endpoint() const;
  std::string nodes_text() const;

  const LaunchPlan& plan_;
  SignalChannel& signals_;
  std::string host_;
  std::ostream& log_;
  std::string error_;
  int signal_ = 0;
};

}  // namespace ddp::launcher
