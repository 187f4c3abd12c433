// In-place recovery across the nodes of a c10d round (rendezvous.h, key
// `recovery`): which generation a lost rank's node takes, whether the job's
// budget allows it, and how the other nodes learn of it. One key for the
// job, "<generation> <round> <busy|done|void> <used> <rank> <node rank>
// <counted> <host>": the node that loses a rank reads it and compareSets
// the next generation (two requests, whatever the nodes); the others read
// it in the tick's one multi_get they make anyway (pending_stop), so
// learning of a recovery costs them no request. <counted> is the job's
// count of recoveries: the closer of a round adds it to the restart count
// (restarts and recoveries share --max_restarts for the job,
// pytorch#108158). A grant its launcher gave up before it began (a second
// failure came first) is void and counts not; its generation is never
// used again.
// A hot spare's takeover (--recovery in_place with --hot_spares, rendezvous.h)
// is such a recovery: the watcher of a lost node takes the generation for it
// and posts the lost node's rank value at r<R>/takeover; the spare that
// claims it holds the record from then on (its `recovered` marks it done).
#include "rendezvous.h"

#include "ddp/common/parse.h"

#include <algorithm>
#include <sstream>
#include <vector>

namespace ddp::rdzv {

namespace {

constexpr long long kMaxGeneration = 1000000000;

struct Record {
  unsigned long long generation = 0;
  int round = -1;
  std::string state;  // busy, done or void
  int used = 0;
  int rank = 0;
  int node_rank = 0;
  long long counted = 0;
  std::string host;
  bool busy() const { return state == "busy"; }
};

// A record ddp-launch wrote; nullopt for anything else (a stray value is
// never taken for a recovery).
std::optional<Record> parse_record(const std::string& v) {
  std::istringstream in(v);
  std::string g, round, state, used, rank, node, counted, host;
  if (!(in >> g >> round >> state >> used >> rank >> node >> counted >> host) ||
      (state != "busy" && state != "done" && state != "void"))
    return std::nullopt;
  try {
    Record r;
    r.generation = static_cast<unsigned long long>(ddp::parse_int(g, "generation", 1, kMaxGeneration));
    r.round = static_cast<int>(ddp::parse_int(round, "round", 0, 1000000000));
    r.state = state;
    r.used = static_cast<int>(ddp::parse_int(used, "used", 0, 2147483647));
    r.rank = static_cast<int>(ddp::parse_int(rank, "rank", 0, 2147483647));
    r.node_rank = static_cast<int>(ddp::parse_int(node, "node rank", 0, 2147483647));
    r.counted = ddp::parse_int(counted, "counted", 0, static_cast<long long>(r.generation));
    r.host = host;
    return r;
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

std::string format_record(const Record& r) {
  return std::to_string(r.generation) + " " + std::to_string(r.round) + " " + r.state + " " + std::to_string(r.used) +
         " " + std::to_string(r.rank) + " " + std::to_string(r.node_rank) + " " + std::to_string(r.counted) + " " +
         r.host;
}

// A name as a record's word (no spaces).
std::string one_word(std::string s) {
  if (s.empty()) s = "?";
  for (char& c : s)
    if (c == ' ') c = '_';
  return s;
}

std::string node_text(const Record& r) { return "node n" + std::to_string(r.node_rank) + " (host " + r.host + ")"; }

}  // namespace

Rendezvous::RecoveryTicket Rendezvous::recover(int budget, int rank) {
  RecoveryTicket t;
  if (round_ < 0) {
    t.refusal = "this node is in no round";
    return t;
  }
  const std::optional<std::string> before = store_.try_get(key("recovery"));
  std::optional<Record> last;
  if (before) {
    last = parse_record(*before);
    if (!last) {
      t.refusal = "the rendezvous store's key " + key("recovery") + " holds a value no ddp-launch node writes";
      return t;
    }
  }
  const unsigned long long generation = last ? last->generation + 1 : 1;
  const long long counted = last ? last->counted : 0;
  // The job's restarts and recoveries before this one: the round's count
  // (its recoveries included) and this round's recoveries since.
  t.used = current_.restart_count + static_cast<int>(counted - recoveries_at_close_);
  if (last && last->busy() && last->round == round_) {
    t.refusal = "the in-place recovery of rank " + std::to_string(last->rank) + " on " + node_text(*last) +
                " (generation " + std::to_string(last->generation) + ") is under way";
    return t;
  }
  if (t.used >= budget) {
    t.used_up = true;
    t.refusal = "--max_restarts " + std::to_string(budget) + " used up (" + std::to_string(t.used) +
                " restarts and recoveries of the job)";
    return t;
  }
  Record mine;
  mine.generation = generation;
  mine.round = round_;
  mine.state = "busy";
  mine.used = t.used;
  mine.rank = rank;
  mine.node_rank = current_.group_rank;
  mine.counted = counted + 1;
  mine.host = one_word(cfg_.hostname);
  const std::string value = format_record(mine);
  // Another node's recovery between the read and this write wins.
  if (store_.compare_set(key("recovery"), before.value_or(""), value) != value) {
    t.refusal = "another node began an in-place recovery at the same moment";
    return t;
  }
  my_recovery_ = value;
  peer_told_ = generation;  // this node's own: not a peer's
  t.granted = true;
  t.generation = generation;
  return t;
}

void Rendezvous::recovered(unsigned long long generation) {
  const std::optional<Record> r = parse_record(my_recovery_);
  if (!r || r->generation != generation) return;
  Record done = *r;
  done.state = "done";
  store_.compare_set(key("recovery"), my_recovery_, format_record(done));
  my_recovery_.clear();
}

void Rendezvous::cancel_recovery() {
  const std::optional<Record> r = parse_record(my_recovery_);
  if (!r) return;
  Record gone = *r;
  gone.state = "void";
  gone.counted = r->counted - 1;
  store_.compare_set(key("recovery"), my_recovery_, format_record(gone));
  my_recovery_.clear();
}

long long Rendezvous::counted_recoveries(const std::optional<std::string>& value) const {
  if (!value) return 0;
  const std::optional<Record> r = parse_record(*value);
  if (!r) throw foreign_value(key("recovery"), *value, "");
  return r->counted;
}

void Rendezvous::saw_recovery(const std::optional<std::string>& value) {
  if (!value || round_ < 0) return;
  const std::optional<Record> r = parse_record(*value);
  if (!r || !r->busy() || r->round != round_ || r->node_rank == current_.group_rank || r->generation <= peer_told_)
    return;
  peer_told_ = r->generation;
  peer_ = PeerRecovery{r->generation, r->used, r->rank, node_text(*r)};
}

std::optional<Rendezvous::PeerRecovery> Rendezvous::peer_recovery() {
  std::optional<PeerRecovery> p;
  std::swap(p, peer_);
  return p;
}

Clock::duration Rendezvous::standby_slice() const {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::max(1.0, cfg_.keep_alive_interval_s)));
}

std::string Rendezvous::post_takeover() {
  if (!cfg_.recovery_in_place || cfg_.hot_spares <= 0 || watched_ < 0 || round_ < 0) return "";
  const std::string no = "; no hot spare takes its place in the running round: ";
  // Node n0's launcher hosts the workers' store: the survivors' ranks lost it.
  if (watched_ == 0) return no + "node n0's launcher hosts the workers' store";
  const std::string w = std::to_string(watched_);
  const auto v = store_.multi_get(
      {key("recovery"), rkey(round_ + 1, "joined"), rkey(round_, "member/" + w), rkey(round_, "place/" + w)});
  std::optional<Record> last;
  if (v[0] && !(last = parse_record(*v[0])))
    return no + "the store's key " + key("recovery") + " holds a value no ddp-launch node writes";
  if (last && last->busy() && last->round == round_)
    return no + "the in-place recovery of rank " + std::to_string(last->rank) + " on " + node_text(*last) +
           " (generation " + std::to_string(last->generation) + ") is under way";
  const long long counted = last ? last->counted : 0;
  const int used = current_.restart_count + static_cast<int>(counted - recoveries_at_close_);
  if (used >= cfg_.max_restarts)
    return no + "--max_restarts " + std::to_string(cfg_.max_restarts) + " used up (" + std::to_string(used) +
           " restarts and recoveries of the job)";
  if (!v[1] || stored_int(rkey(round_ + 1, "joined"), *v[1], 0, 0, 2147483647) == 0)
    return no + "none stands by";
  const auto place = v[3] ? words(*v[3]) : std::vector<std::string>{};
  if (place.size() < 8) return no + "the node that closed round " + std::to_string(round_) + " did not say its place";
  Record mine;
  mine.generation = last ? last->generation + 1 : 1;
  mine.round = round_;
  mine.state = "busy";
  mine.used = used;
  mine.rank = static_cast<int>(stored_int(rkey(round_, "place/" + w), *v[3], 1, 0, 2147483647));
  mine.node_rank = watched_;
  mine.counted = counted + 1;
  const auto member = v[2] ? words(*v[2]) : std::vector<std::string>{};
  mine.host = one_word(member.empty() ? "" : member[0]);
  const std::string record = format_record(mine);
  if (store_.compare_set(key("recovery"), v[0].value_or(""), record) != record)
    return no + "another node began an in-place recovery at the same moment";
  takeover_ = "open " + std::to_string(mine.generation) + " " + std::to_string(used) + " " + *v[3];
  store_.set(rkey(round_, "takeover"), takeover_);
  takeover_rank_ = watched_;
  takeover_record_ = record;
  // The spare sees it at its next standby read; then the lost node's
  // heartbeat moves again, or a keep-alive timeout later the round ends.
  watched_seen_ = now_() + standby_slice();
  saw_recovery(record);  // this node's ranks re-form under G too
  return "";
}

std::string Rendezvous::void_takeover(const std::string& what) {
  if (takeover_rank_ < 0) return "";
  std::string gone = takeover_;
  gone.replace(0, 4, "void");
  const bool claimed = store_.compare_set(rkey(round_, "takeover"), takeover_, gone) != gone;
  // The full restart that follows counts, not the takeover too.
  if (const std::optional<Record> r = parse_record(takeover_record_)) {
    Record v = *r;
    v.state = "void";
    v.counted = r->counted - 1;
    store_.compare_set(key("recovery"), takeover_record_, format_record(v));
  }
  takeover_rank_ = -1;
  takeover_.clear();
  takeover_record_.clear();
  return std::string("; ") + (claimed ? "the hot spare that took its place did not beat " : "no hot spare took its place ") +
         what + ": full restart";
}

bool Rendezvous::claim_takeover(int R, const std::string& open, long long slot) {
  const std::string k = rkey(R, "takeover");
  const auto w = words(open);
  if (w.size() < 11 || w[0] != "open") return false;
  Round r;
  r.round = R;
  r.recovery_generation = static_cast<unsigned long long>(stored_int(k, open, 1, 1, kMaxGeneration));
  r.recovery_used = static_cast<int>(stored_int(k, open, 2, 0, 2147483647));
  r.group_world_size = static_cast<int>(stored_int(k, open, 7, 1, cfg_.max_nodes));
  r.group_rank = static_cast<int>(stored_int(k, open, 3, 0, r.group_world_size - 1));
  r.base_rank = static_cast<int>(stored_int(k, open, 4, 0, 2147483647));
  r.world_size = static_cast<int>(stored_int(k, open, 5, 1, 2147483647));
  r.restart_count = static_cast<int>(stored_int(k, open, 6, 0, 2147483647));
  const long long recoveries = stored_int(k, open, 10, 0, r.restart_count);
  const std::string member = rkey(R, "member/" + std::to_string(r.group_rank));
  const auto v = store_.multi_get({rkey(R, "master"), member, key("recovery")});
  // Its ranks must be the lost node's: as many, under the generation posted.
  const auto lost = v[1] ? words(*v[1]) : std::vector<std::string>{};
  if (lost.size() < 4 || lost[3] != std::to_string(cfg_.nproc) || !v[0] || !v[2]) return false;
  const std::optional<Record> record = parse_record(*v[2]);
  if (!record || !record->busy() || record->generation != r.recovery_generation || record->round != R) return false;
  // Its join slot makes the value its own: another spare's compareSet of
  // the same takeover gets a value it did not write.
  const std::string claimed = "claimed" + open.substr(4) + " by " + std::to_string(slot);
  if (store_.compare_set(k, open, claimed) != claimed) return false;  // another spare's, or void
  const auto m = words(*v[0]);
  r.master_addr = m.empty() ? "" : m[0];
  r.master_port = static_cast<int>(stored_int(rkey(R, "master"), *v[0], 1, 1, 65535));
  const auto me = words(self_);
  r.replaced = std::to_string(r.group_rank) + ":" + me.at(0) + ":" + me.at(1) + ":" + lost[0] + ":" + lost[1];
  // This node is the lost one's from now: messages name it; its slot in
  // round R+1 is no spare's any more.
  store_.multi_set({{member, self_}, {rkey(R + 1, "node/" + std::to_string(slot - 1)), "gone"}});
  round_ = R;
  current_ = r;
  recoveries_at_close_ = recoveries;
  my_recovery_ = *v[2];
  peer_told_ = r.recovery_generation;
  peer_.reset();
  watch_ring();  // its beat on the lost node's key: the ring is whole again
  return true;
}

}  // namespace ddp::rdzv
