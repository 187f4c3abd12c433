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
#include "rendezvous.h"

#include "ddp/common/parse.h"

#include <sstream>

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
  mine.host = cfg_.hostname.empty() ? "?" : cfg_.hostname;
  for (char& c : mine.host)
    if (c == ' ') c = '_';
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

}  // namespace ddp::rdzv
