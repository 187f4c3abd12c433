#pragma once
// The c10d rendezvous of ddp-launch agents (one per node): rounds of nodes
// meeting in the rendezvous store at --rdzv_endpoint, as torchrun's
// DynamicRendezvousHandler does, with plain keys instead of one pickled blob.
// Every phase costs a node a number of store requests that does not grow
// with the nodes (docs/architecture.md has the table; pytorch#124982 did the
// same for torchrun): waits are answered by the store when their key is
// set, and no node reads a value of O(n) bytes, except the one that closes
// a round (two requests of O(n) bytes).
// Keys live under /ddp-rdzv/<rdzv_id>/; each round R under r<R>/:
//  - join: n = add(r<R>/joined, 1), descriptor at r<R>/node/<n-1>; a node
//    of round R-1 also adds to r<R>/back. The round closes (compareSet of
//    r<R>/closed to "<count> <closer's n> <slots>") when max nodes joined
//    (round 0: the max-th node closes it at once; later rounds: once every
//    node of R-1 not counted lost in r<R-1>/lost is back, or a keep-alive
//    timeout after R-1 ended), or min joined and last_call_timeout passed
//    since a node with n >= min joined, and only once round R-1 is over
//    (r<R-1>/end set). The closer picks `count` nodes among the first
//    `slots` joiners (nodes of R-1 first); the rest of those are spares
//    (rank key "spare") and, like joiners with n > slots, join round R+1,
//    which running nodes below max_nodes notice and restart for. The others
//    wait for r<R>/closed.
//  - hot spares (Config::hot_spares): joiners of round R+1 while R runs with
//    max nodes stand by there with no join_timeout, one wait and one read a
//    keep-alive interval; one beyond hot_spares marks its slot "gone" and
//    ends (more agents than the maximum never close the rendezvous, unlike
//    NVRx #348). A spare that sees the job done ends (SpareNotNeeded).
//  - the closer reads the round's descriptors (one multi_get), orders the
//    nodes, and writes each its node rank, base rank, world size, restart
//    count and node count (r<R>/rank/<n-1>), the descriptors by rank
//    (r<R>/member/<rank>, for messages) and who replaced whom (r<R>/replaced:
//    newcomers take the ranks of R-1's nodes that did not come back) in one
//    multi_set; every node waits for its own key.
//  - node rank 0 picks the workers' MASTER_ADDR:MASTER_PORT (a fresh port each
//    round: no rank of an old round meets a new one) at r<R>/master; the
//    others wait for it. Restart count: the rounds before R that ended by a
//    failure.
//  - while the workers run: every node bumps r<R>/hb/<rank> each
//    keep_alive_interval and watches one peer, the next node rank (a ring):
//    a peer whose counter stops moving for keep_alive_interval *
//    keep_alive_max_attempt has left; so has a node whose launcher has been
//    silent that long (its helper stops beating and says so). A ring keeps
//    a keep-alive O(1) per node and per request on any key-value store; a
//    node and its watcher lost together are noticed by the watcher's
//    watcher. The first node to see a reason to stop writes it to
//    r<R>/restart (compareSet: one reason per round) and sets r<R>/end;
//    every node sees it at its next tick and stops. An abort (no restarts
//    left) goes to the run-wide key.
//  - in-place recovery across nodes (rendezvous_recovery.cpp): the job's
//    one key `recovery` holds the latest one, "<generation> <round>
//    <busy|done|void> <used> <rank> <node rank> <counted> <host>". A node
//    that loses a rank reads it and compareSets the next generation busy
//    (two requests; busy of this round: another recovery runs, refused);
//    when the rank is back, one compareSet to done (void, uncounted: its
//    launcher gave it up first). The other nodes read it in the tick's one
//    multi_get (no extra request) and tell their launchers. The closer adds
//    <counted> to the restart count: restarts and recoveries share
//    --max_restarts for the job (pytorch#108158).
//  - takeover (rendezvous_recovery.cpp; --recovery in_place with
//    --hot_spares): the watcher that finds a node other than n0 lost does
//    not end the round; it takes the job's next recovery generation (the
//    record above, counted once) and posts r<R>/takeover, "open <G> <used>
//    <the lost node's rank value>" (three requests). A spare standing by in
//    R+1 reads that key in the read it makes anyway, claims it by
//    compareSet (open -> claimed: one spare wins), takes the lost node's
//    rank value, marks its R+1 slot gone and beats the lost node's
//    heartbeat key: its ranks come back in place under G, the survivors
//    hear G as any peer recovery. Unclaimed (or unbeaten) a keep-alive
//    timeout after a spare's standby read, the watcher voids both and
//    ends the round as before, saying why.
//  - exit barrier: nodes whose workers succeeded add to r<R>/done_count; the
//    last sets r<R>/end, for which all wait (and keep beating); then they add
//    to r<R>/left, the last sets r<R>/all_left, for which the host waits, so
//    it keeps the store up until all are through.
//  - the rendezvous format (kFormat, "ddp-rdzv/3"): the words of these
//    values changed with hot spares, so each descriptor (words 8 and 9: the
//    node's format and ddp-launch version) and each rank value (words 6 and
//    7, then the job's recoveries at the close) carry it, at no request's cost. The closer that finds a node of
//    another format, or a node whose rank value comes from another
//    format's closer, ends the job (its abort key) with one line naming
//    both versions; nodes waiting for their rank value read that key. The
//    round key stays a bare number: an older node advances it by
//    compare-and-set on that number.
// Everything that can block takes a deadline; a store that stops answering
// is reported, never waited on forever.
//
// The store is ddp-launch's own (store_server.h), not LibTorch's TCPStore:
// only ddp-launch nodes speak to it. A torchrun node at the same endpoint
// fails its TCPStore handshake there (the host names it, and ends the
// rendezvous: tcpstore_client), and a ddp-launch node fails its hello at a
// torchrun node's store (store_client.h: ForeignStore).

#include "ddp/rdzv/agent_lines.h"
#include "store.h"

#include <chrono>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
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
  // A torchrun node's TCPStore client at this node's store: how long a
  // join still waits for the round to close, then ends the rendezvous.
  double tcpstore_client_grace_s = 30;
  // --hot_spares: nodes beyond max_nodes that stand by while a round runs,
  // with no join_timeout, and take the place of a node that left in the
  // next round (0: a node beyond max_nodes waits join_timeout, as torchrun's).
  int hot_spares = 0;
  // --recovery in_place and --max_restarts (the job's budget, shared by
  // restarts and recoveries): with hot_spares, a node lost while a round
  // runs is replaced within that round by a spare whose ranks come back in
  // place (rendezvous_recovery.cpp); without, the round ends as before.
  bool recovery_in_place = false;
  int max_restarts = 0;
  // This node's ddp-launch version, for the rendezvous format's messages.
  std::string launcher_version = "unknown";
};

// A reason for this node to stop its workers: `counted` restarts (a failure)
// count against --max_restarts, a new node waiting to join does not; an
// abort ends the job on every node.
struct Stop {
  enum Kind { Restart, Abort } kind = Restart;
  bool counted = true;
  std::string reason;
};

// The space-separated words of a stored value.
std::vector<std::string> words(const std::string& s);

// The rendezvous could not be made (timeout, store gone): one line.
struct RendezvousError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A hot spare stood by until the job finished: not an error (its launcher
// exits 0). what(): one line that says so.
struct SpareNotNeeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Rendezvous {
 public:
  // store: a StoreClient (a MemoryStore in tests); pick_port: the port of
  // the workers' store, asked when this node is a round's node rank 0 (the
  // helper: its launcher's bound store, join's port); now: every timeout and heartbeat interval is
  // measured on it (a fake clock in tests). idle(ms): called after a store
  // wait that timed out, with the milliseconds until this node's next
  // deadline; it may return at once (the helper does) or let up to ms pass
  // (a test's fake clock), and returns false when the caller wants to give
  // up (the launcher has gone).
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

  // The store this node hosts saw a torchrun node's TCPStore client (`who`:
  // "a torchrun node (torch 2.x TCPStore client) at ADDR"): a join in
  // progress or to come ends the rendezvous for every node
  // tcpstore_client_grace_s after the first, unless its round closes first
  // (the torchrun node was a stray: the job goes on without it).
  void tcpstore_client(const std::string& who);

  // In-place recovery of this node's global rank `rank` (recover's
  // answer): the job-wide generation G its ranks re-form under, and the
  // restarts and recoveries of the job before it; refused while another
  // node's recovery of this round is busy, or once they reach `budget`
  // (--max_restarts; used_up).
  struct RecoveryTicket {
    bool granted = false;
    bool used_up = false;
    unsigned long long generation = 0;
    int used = 0;
    std::string refusal;  // why not, one clause
  };
  RecoveryTicket recover(int budget, int rank);
  // This node's recovery of `generation` is over (its rank is back).
  void recovered(unsigned long long generation);
  // This node's launcher gave its granted recovery up before it began (a
  // second failure came first): void, it counts not.
  void cancel_recovery();
  // A recovery another node of this round began, seen by the last tick;
  // each one once.
  struct PeerRecovery {
    unsigned long long generation = 0;
    int used = 0;
    int rank = 0;
    std::string node;  // "node n<rank> (host <host>)"
  };
  std::optional<PeerRecovery> peer_recovery();

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
  // The error for a value at key k that no ddp-launch node writes
  // (`what`: how it is wrong, or "").
  RendezvousError foreign_value(const std::string& k, const std::string& value, const std::string& what) const;
  // Word `word` (0-based) of key k's value as an integer in [lo, hi];
  // RendezvousError naming the key and the value otherwise.
  long long stored_int(const std::string& k, const std::string& value, std::size_t word, long long lo,
                       long long hi) const;
  // Waits for key until `until` (now_), in store waits of at most slice;
  // between two, `between` may end the wait by throwing. False at until.
  bool await_key(const std::string& full_key, Clock::time_point until, std::chrono::milliseconds slice,
                 const std::function<bool(int)>& idle, const std::function<void()>& between = {});
  // How a round closed: its node count, the join slots it chose them from
  // (the others of those are its spares; later slots are late), and
  // whether this node closed it.
  struct Closed {
    int nodes = 0;
    long long slots = 0;
    bool closer = false;
    bool took_over = false;  // this spare took a lost node's place in round R-1 (current_ holds it)
  };
  // Joins round R as slot n (1-based): waits until the round closes, closing
  // it when this node may. survivor: this node was in round R-1.
  Closed await_close(int R, long long n, bool survivor, Clock::time_point start, Clock::time_point deadline,
                     const std::function<bool(int)>& idle);
  // A node joining round R beyond the job's nodes while R-1 runs: throws
  // when --hot_spares spares stand by already.
  void check_spare_room(int R, long long n);
  // The closer's part: every node's rank, in one read and one write.
  void assign_ranks(int R, int K, long long slots, Clock::time_point until, const std::function<bool(int)>& idle);
  std::optional<Stop> pending_stop();
  // The job's recovery record (key "recovery") as pending_stop read it.
  void saw_recovery(const std::optional<std::string>& record);
  // The job's recoveries that count, from its record (0: none); a value
  // no ddp-launch node writes is a RendezvousError.
  long long counted_recoveries(const std::optional<std::string>& record) const;
  // Writes a reason to stop the round (the first one wins) and ends it;
  // true when this node's was the one.
  bool stop_round(const std::string& value, bool lost = false);
  // A node left the round (lost): counted once, with the round's reason, so
  // the next round knows how many of this one's nodes come back.
  void stop_round_lost(const std::string& why);
  std::optional<std::string> lost_node();
  // Takeover (rendezvous_recovery.cpp). The watcher: posts one for the
  // watched node, lost (`why`); "" when posted, else the clause that says
  // why not (nothing when the job has no spares or no in-place recovery:
  // the text stays today's).
  std::string post_takeover();
  // The watcher: the posted takeover is over without a spare (the round
  // ends): voids it and its recovery record; the clause that says so.
  std::string void_takeover(const std::string& what);
  // A spare standing by in round R+1: claims round R's open takeover;
  // true when this node now runs in R in the lost node's place.
  bool claim_takeover(int R, const std::string& open, long long slot);
  // How long a spare may take to see a takeover (its standby read).
  Clock::duration standby_slice() const;
  std::string node_name(int rank);
  // Starts the keep-alive ring of the round this node runs in (current_).
  void watch_ring();
  void heartbeat();
  void saw_abort();
  std::string timeout_message(int round, double waited_s);
  // The line for a node of another rendezvous format: `who` says who
  // (e.g. "the node on host h (pid 42) runs"); `value` is the words it
  // wrote, `at` the index of its format word.
  std::string format_mismatch(const std::string& who, const std::vector<std::string>& value, std::size_t at) const;
  // The same line, written to the job's abort key first (every node ends).
  [[noreturn]] void abort_mixed(const std::string& why);
  double since(Clock::time_point t) const;

  Store& store_;
  Config cfg_;
  std::function<int()> pick_port_;
  Now now_;
  int round_ = -1;                 // the round this node is in (-1 none)
  Round current_;
  std::string self_;               // this node's descriptor in its last join
  int watched_ = -1;               // the node rank whose heartbeat this node watches (-1 none)
  long long watched_beats_ = -1;
  Clock::time_point watched_seen_;  // when its counter last moved
  Clock::time_point watched_read_;  // when this node last read it
  Clock::time_point last_beat_sent_;
  long long abort_seen_count_ = 0; // what this node's add to abort_seen returned (0: not yet)
  std::string tcpstore_client_;     // the first torchrun node seen ("" none)
  Clock::time_point tcpstore_client_at_;
  // In-place recovery: the job's recoveries when this round closed (the
  // closer's read), this node's busy record ("" none), the highest
  // generation told to the launcher, and one not told yet.
  long long recoveries_at_close_ = 0;
  std::string my_recovery_;
  unsigned long long peer_told_ = 0;
  std::optional<PeerRecovery> peer_;
  // Takeover: the node rank this node's watch posted one for (-1 none),
  // the value posted and the recovery record it wrote.
  int takeover_rank_ = -1;
  std::string takeover_;
  std::string takeover_record_;
};

}  // namespace ddp::rdzv
