#pragma once
// The c10d rendezvous of ddp-launch agents (one per node): rounds of nodes
// meeting in the rendezvous store at --rdzv_endpoint, as torchrun's
// DynamicRendezvousHandler does, with plain keys instead of one pickled blob.
// Keys live under /ddp-rdzv/<rdzv_id>/; each round R under r<R>/:
//  - join: n = add(r<R>/joined, 1), descriptor at r<R>/node/<n-1>. The round
//    closes (compareSet of r<R>/closed to the count) when max nodes joined, or
//    min joined and last_call_timeout passed since this node saw min. Joiners
//    with n <= closed are its nodes, node rank n-1; later ones are late and
//    join round R+1, which running nodes notice and restart for.
//  - node rank 0 picks the workers' MASTER_ADDR:MASTER_PORT (a fresh port each
//    round: no rank of an old round meets a new one) and the round's restart
//    count: the previous round's plus 1 when that round ended by a failure.
//  - while the workers run: every node bumps r<R>/hb/<rank>; a node whose
//    counter stops moving for keep_alive_interval * keep_alive_max_attempt
//    (and that is not done) has left; so has a node whose launcher has been
//    silent that long (its helper stops beating and says so). The first node to see a reason to stop
//    writes it to r<R>/restart (compareSet: one reason per round); every node
//    sees it and stops. An abort (no restarts left) goes to the run-wide key.
//  - exit barrier: nodes whose workers succeeded wait for the round's others
//    (r<R>/done), so the host keeps the store up until all are through.
// Everything that can block takes a deadline; a store that stops answering
// is reported, never waited on forever.
//
// The store is ddp-launch's own (store_server.h), not LibTorch's TCPStore:
// only ddp-launch nodes speak to it. A torchrun node at the same endpoint
// fails its TCPStore handshake there, and a ddp-launch node fails its hello
// at a torchrun node's store (store_client.h: ForeignStore).

#include "ddp/rdzv/agent_lines.h"
#include "store.h"

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::rdzv {

using Clock = std::chrono::steady_clock;
// The rendezvous' time: Clock::now, or a test's fake clock.
using Now = std::function<Clock::time_point()>;

struct Config {
  std::string endpoint;         // host:port as given, for messages
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc = 1;                // this node's workers
  std::string local_addr;       // this node's address for its workers' MASTER_ADDR ("" unknown)
  std::string hostname;
  bool hosts_store = false;     // this node's helper hosts the rendezvous store
  double join_timeout_s = 600;
  double last_call_timeout_s = 30;
  double close_timeout_s = 30;
  double keep_alive_interval_s = 5;
  int keep_alive_max_attempt = 3;
  double exit_barrier_timeout_s = 300;
};

// A reason for this node to stop its workers: `counted` restarts (a failure)
// count against --max_restarts, a new node waiting to join does not; an
// abort ends the job on every node.
struct Stop {
  enum Kind { Restart, Abort } kind = Restart;
  bool counted = true;
  std::string reason;
};

// The rendezvous could not be made (timeout, store gone): one line.
struct RendezvousError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Rendezvous {
 public:
  // store: a StoreClient (a MemoryStore in tests); pick_port: a free port
  // for the workers' store; now: every timeout and heartbeat interval is
  // measured on it (a fake clock in tests). idle: called between store
  // polls with the milliseconds to wait, returns false when the caller
  // wants to give up (the launcher has gone).
  Rendezvous(Store& store, Config cfg, std::function<int()> pick_port, Now now = Clock::now);

  // Joins the next round and waits for it to close. Throws RendezvousError.
  Round join(const std::function<bool(int)>& idle);

  // While the round's workers run: heartbeat, and a reason to stop if any.
  // agent_silent_s: seconds since this node's launcher last spoke; beyond
  // keep_alive_interval * keep_alive_max_attempt the node sends no heartbeat
  // and ends the round as a node lost (its launcher stopped or hung): the
  // workers of a launcher that cannot supervise them must not hold the job.
  std::optional<Stop> tick(double agent_silent_s = 0);

  // This node's workers failed: records the reason unless another node's
  // came first, and returns the round's reason (which may be the other's).
  Stop fail(const std::string& reason);

  // Ends the job on every node. The host keeps the store up until the
  // round's other nodes have seen it (bounded by close_timeout, 10 s at most).
  void abort(const std::string& reason, const std::function<bool(int)>& idle);

  // This node's workers succeeded: waits for the round's other nodes (exit
  // barrier). Returns "" when all finished, else what cut the wait short.
  std::string done(const std::function<bool(int)>& idle);

  // Milliseconds between ticks while workers run.
  int tick_ms() const;

  // While the workers run: this node's last window of step statistics
  // (the launcher's "steps" line, opaque here) under r<R>/steps/<node
  // rank>; returns every node's of this round, in node order, joined by
  // '|' (a node that has published none yet is left out). The launchers
  // compare them to name the slowest rank of the whole job.
  std::string share_steps(const std::string& payload);

 private:
  std::string key(const std::string& k) const;
  std::string rkey(int round, const std::string& k) const;
  long long counter(const std::string& full_key);
  std::optional<std::string> value(const std::string& full_key);
  std::optional<Stop> pending_stop();
  std::optional<std::string> lost_node();
  std::string node_name(int rank) const;
  void heartbeat();
  void saw_abort();
  std::string timeout_message(int round, double waited_s);
  double since(Clock::time_point t) const;

  Store& store_;
  Config cfg_;
  std::function<int()> pick_port_;
  Now now_;
  int round_ = -1;                 // the round this node is in (-1 none)
  Round current_;
  std::vector<std::string> members_;      // descriptors of the round's nodes
  std::vector<std::string> last_members_; // of the previous round this node was in
  std::vector<long long> beats_;
  std::vector<Clock::time_point> beat_seen_;
  Clock::time_point last_beat_sent_;
  bool abort_seen_ = false;
};

}  // namespace ddp::rdzv
