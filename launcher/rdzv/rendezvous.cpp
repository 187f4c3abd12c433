#include "rendezvous.h"

#include "ddp/common/parse.h"
#include "ddp/common/untrusted_text.h"

#include <algorithm>
#include <sstream>
#include <tuple>
#include <unistd.h>

namespace ddp::rdzv {

namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::chrono::milliseconds to_ms(Clock::duration d) {
  return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(d));
}

constexpr long long kMaxInt = 2147483647;
// Rounds: a run restarts far fewer times.
constexpr long long kMaxRound = 1000000000;

// The longest single store wait of a joining node: between two it looks at
// the run's abort key and its own deadline (and its launcher).
constexpr std::chrono::milliseconds kJoinSlice{1000};

std::string seconds_text(double s) {
  std::ostringstream o;
  o << static_cast<long long>(s + 0.5) << " s";
  return o.str();
}

// "host pid addr nproc last_rank store_host last_round" (last_rank: the node's rank in
// the last round it took part in, -1 for none; store_host: 1 when its helper
// hosts the rendezvous store).
// last_round: the round it took part in last, -1 for none.
struct Descriptor {
  std::string host, pid, addr;
  int nproc = 1;
  int last_rank = -1;
  int store_host = 0;
  int last_round = -1;
};
Descriptor parse_descriptor(const std::string& s) {
  Descriptor d;
  std::istringstream in(s);
  in >> d.host >> d.pid >> d.addr >> d.nproc >> d.last_rank >> d.store_host >> d.last_round;
  return d;
}

// A join slot's descriptor of a surplus node that left at once, and a
// rank key's value for a node the round did not take (it stands by).
const std::string kGone = "gone";
const std::string kSpare = "spare";

// The rendezvous format: the words of the values below. Bump it with any
// change to them (format 1: before hot spares, 6-word descriptors and
// 4-word rank values; 2: hot spares, 7 and 5 words, no format word; 3: 9
// and 8 words, the job's recoveries last in a rank value). Its place
// stays: word 8 of a descriptor, word 6 of a rank value, each followed by
// the writer's ddp-launch version.
const std::string kFormatPrefix = "ddp-rdzv/";
const std::string kFormat = kFormatPrefix + "3";

// Who wrote a value whose word `at` should be kFormat, as far as it says.
std::string writer(const std::vector<std::string>& w, std::size_t at) {
  if (at >= w.size()) return "an older ddp-launch (its rendezvous values carry no format)";
  if (w[at].rfind(kFormatPrefix, 0) != 0)
    return "an older ddp-launch or another program (no rendezvous format where it belongs)";
  // Anyone may write the store: a word is shown short and visible.
  const std::string version = at + 1 < w.size() ? ddp::visible_text(w[at + 1].substr(0, 32)) : "?";
  return "ddp-launch " + version + " (rendezvous format " +
         ddp::visible_text(w[at].substr(kFormatPrefix.size(), 16)) + ")";
}

}  // namespace

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A value no ddp-launch node writes, found at key k: named (its start: a
// value may be megabytes) as the store's content, never taken for a lost
// store (issue 51 item 8). `what`: what was wrong with it, or "".
RendezvousError Rendezvous::foreign_value(const std::string& k, const std::string& value,
                                          const std::string& what) const {
  return RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id + "): the store's key " + k +
                         " holds '" + shown_value(value) + "', which no ddp-launch node writes" + what +
                         "; another program wrote to the rendezvous store: start the job with another --rdzv_id");
}

// A number that a node wrote to the store, read back. The store takes
// anyone's requests, so a bad one is a foreign_value.
long long Rendezvous::stored_int(const std::string& k, const std::string& value, std::size_t word, long long lo,
                                 long long hi) const {
  const auto w = words(value);
  try {
    if (word >= w.size()) throw std::invalid_argument("too few words");
    return ddp::parse_int(w[word], k, lo, hi);
  } catch (const std::invalid_argument&) {
    throw foreign_value(k, value, " (word " + std::to_string(word + 1) + " should be a number from " +
                                      std::to_string(lo) + " to " + std::to_string(hi) + ")");
  }
}

std::string Rendezvous::format_mismatch(const std::string& who, const std::vector<std::string>& value,
                                        std::size_t at) const {
  return "rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id +
         "): every node must run the same ddp-launch version; this node runs ddp-launch " + cfg_.launcher_version +
         " (rendezvous format " + kFormat.substr(kFormatPrefix.size()) + "), " + who + " " + writer(value, at) +
         ": start every node with one ddp-launch version";
}

void Rendezvous::abort_mixed(const std::string& why) {
  store_.compare_set(key("abort"), "", why);
  throw RendezvousError(why);
}

Rendezvous::Rendezvous(Store& store, Config cfg, std::function<int()> pick_port, Now now)
    : store_(store), cfg_(std::move(cfg)), pick_port_(std::move(pick_port)), now_(std::move(now)) {}

double Rendezvous::since(Clock::time_point t) const { return std::chrono::duration<double>(now_() - t).count(); }

std::string Rendezvous::key(const std::string& k) const { return "/ddp-rdzv/" + cfg_.run_id + "/" + k; }
std::string Rendezvous::rkey(int round, const std::string& k) const {
  return key("r" + std::to_string(round) + "/" + k);
}

long long Rendezvous::counter(const std::string& k) { return store_.add(k, 0); }

std::optional<std::string> Rendezvous::value(const std::string& k) {
  return store_.try_get(k);
}

bool Rendezvous::await_key(const std::string& k, Clock::time_point until, std::chrono::milliseconds slice,
                           const std::function<bool(int)>& idle, const std::function<void()>& between) {
  while (true) {
    const auto left = to_ms(until - now_());
    if (left.count() <= 0) return false;
    if (store_.wait(k, std::min(left, slice))) return true;
    if (between) between();
    if (!idle(static_cast<int>(to_ms(until - now_()).count())))
      throw RendezvousError("the launcher went away during the rendezvous");
  }
}

std::string Rendezvous::share_steps(const std::string& payload) {
  if (round_ < 0) return "";
  store_.set(rkey(round_, "steps/" + std::to_string(current_.group_rank)), payload);
  std::vector<std::string> keys;
  for (int i = 0; i < current_.group_world_size; ++i) keys.push_back(rkey(round_, "steps/" + std::to_string(i)));
  std::string all;
  for (const auto& v : store_.multi_get(keys)) {
    if (!v || v->empty()) continue;
    all += (all.empty() ? "" : "|") + *v;
  }
  return all;
}

void Rendezvous::tcpstore_client(const std::string& who) {
  if (!tcpstore_client_.empty()) return;  // the first one: torchrun retries
  tcpstore_client_ = who;
  tcpstore_client_at_ = now_();
}

int Rendezvous::tick_ms() const {
  return static_cast<int>(std::clamp(cfg_.keep_alive_interval_s * 1000 / 4, 50.0, 500.0));
}

std::string Rendezvous::node_name(int rank) {
  const auto d = rank == current_.group_rank ? self_ : value(rkey(round_, "member/" + std::to_string(rank)));
  const Descriptor p = parse_descriptor(d.value_or("? ?"));
  return "node n" + std::to_string(rank) + " (pid " + p.pid + ", host " + p.host + ")";
}

std::string Rendezvous::timeout_message(int round, double waited_s) {
  const long long joined = counter(rkey(round, "joined"));
  std::ostringstream m;
  m << "rendezvous at " << cfg_.endpoint << " (rdzv_id " << cfg_.run_id << "): " << joined << "/" << cfg_.min_nodes
    << " nodes joined after " << seconds_text(waited_s);
  if (cfg_.min_nodes != cfg_.max_nodes) m << " (--nnodes " << cfg_.min_nodes << ":" << cfg_.max_nodes << ")";
  // A round that is still running keeps late nodes out until it ends.
  if (round > 0 && joined >= cfg_.min_nodes && !store_.check(rkey(round - 1, "restart")))
    m << "; round " << round - 1 << " is running with the most nodes allowed and did not end meanwhile";
  // Who of this node's last round never came back (an error's path: two
  // reads of O(n) bytes).
  if (round_ >= 0) {
    std::vector<std::string> keys;
    for (long long i = 0; i < joined; ++i) keys.push_back(rkey(round, "node/" + std::to_string(i)));
    std::vector<std::string> here;
    for (const auto& d : store_.multi_get(keys))
      if (d) {
        const Descriptor p = parse_descriptor(*d);
        here.push_back(p.host + " " + p.pid);
      }
    keys.clear();
    for (int i = 0; i < current_.group_world_size; ++i) keys.push_back(rkey(round_, "member/" + std::to_string(i)));
    const auto last = store_.multi_get(keys);
    for (std::size_t i = 0; i < last.size(); ++i) {
      if (!last[i]) continue;
      const Descriptor p = parse_descriptor(*last[i]);
      if (std::find(here.begin(), here.end(), p.host + " " + p.pid) == here.end())
        m << "; node n" << i << " (pid " << p.pid << ", host " << p.host << ") of round " << round_
          << " did not come back";
    }
  }
  return m.str();
}

Rendezvous::Closed Rendezvous::await_close(int R, long long n, bool survivor, Clock::time_point start,
                                           Clock::time_point deadline, const std::function<bool(int)>& idle) {
  const std::string closed = rkey(R, "closed");
  const std::string prev_end = R > 0 ? rkey(R - 1, "end") : "";
  // A round opens only after the previous one has ended for all its nodes
  // (its end key is set): a late node must not start alone.
  bool prev_over = R == 0;
  // When this node saw round R-1 end: its nodes that come back do so at
  // once; a keep-alive timeout later, spares fill the places of the others.
  std::optional<Clock::time_point> prev_seen;
  const auto keep_alive_timeout = seconds(cfg_.keep_alive_interval_s * cfg_.keep_alive_max_attempt);
  // A hot spare waits while round R-1 runs with no join_timeout, one
  // request in a keep-alive interval (a second at least) and a read.
  const auto standby_slice = std::max(kJoinSlice, to_ms(seconds(cfg_.keep_alive_interval_s)));
  // A node that joined as the min-th or later: since when the last call runs.
  std::optional<Clock::time_point> min_seen;
  const std::string mine = std::to_string(n);
  // count nodes out of the slots joined now: "<count> <closer's n> <slots>".
  auto close_at = [&](long long count, long long slots) {
    const std::string desired = std::to_string(count) + " " + mine + " " + std::to_string(slots);
    return store_.compare_set(closed, "", desired) == desired;
  };
  while (true) {
    if (!prev_over) {
      // A spare also reads round R-1's takeover (rendezvous_recovery.cpp),
      // in the same request.
      const bool may_take_over = cfg_.hot_spares > 0 && cfg_.recovery_in_place && !survivor && R > 0;
      std::vector<std::string> ks = {key("abort"), prev_end};
      if (may_take_over) ks.push_back(rkey(R - 1, "takeover"));
      const auto v = store_.multi_get(ks);
      if (v[0]) {
        saw_abort();
        throw RendezvousError("the job was ended: " + *v[0]);
      }
      if (const auto& e = v[1]) {
        if (*e == "done") {
          if (cfg_.hot_spares > 0 && !survivor)
            throw SpareNotNeeded("the job finished in round " + std::to_string(R - 1) + " while this node stood by "
                                 "as a hot spare (--hot_spares " + std::to_string(cfg_.hot_spares) + "): not needed");
          throw RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id +
                                "): the job already finished in round " + std::to_string(R - 1) +
                                "; start a new job with another --rdzv_id");
        }
        prev_over = true;
        prev_seen = now_();
        // A spare may have stood by for days: its join_timeout starts now.
        if (cfg_.hot_spares > 0) deadline = std::max(deadline, now_() + seconds(cfg_.join_timeout_s));
      } else if (may_take_over && v[2] && v[2]->rfind("open ", 0) == 0 && claim_takeover(R - 1, *v[2], n)) {
        return {0, 0, false, true};
      }
    } else if (auto a = value(key("abort"))) {
      saw_abort();
      throw RendezvousError("the job was ended: " + *a);
    }
    const bool standing_by = !prev_over && cfg_.hot_spares > 0;
    Clock::time_point next = standing_by ? now_() + standby_slice : deadline;
    if (!tcpstore_client_.empty()) {
      const auto ends = tcpstore_client_at_ + seconds(cfg_.tcpstore_client_grace_s);
      if (now_() >= ends) {
        const std::string why = "rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id + "): " +
                                tcpstore_client_ + " tried to join " + seconds_text(since(tcpstore_client_at_)) +
                                " ago, and " + std::to_string(counter(rkey(R, "joined"))) + "/" +
                                std::to_string(cfg_.min_nodes) + " nodes joined; ddp-launch and torchrun nodes "
                                "cannot join one rendezvous: start every node with ddp-launch";
        // Every node that joined ends with this reason (the job's abort key).
        store_.compare_set(key("abort"), "", why);
        throw RendezvousError(why);
      }
      next = std::min(next, ends);
    }
    // Full (max nodes): the first round at once; a later one once every
    // node of round R-1 that did not leave is back (it keeps its node rank),
    // or a keep-alive timeout after R-1 ended (a node that has not come back
    // by then is gone, and a spare takes its place).
    bool full = false;
    long long slots = n;
    if (prev_over && R == 0) {
      full = n >= cfg_.max_nodes;
    } else if (prev_over) {
      const bool waited = now_() >= *prev_seen + keep_alive_timeout;
      if (survivor || waited || n >= cfg_.max_nodes) {
        const auto v = store_.multi_get({rkey(R, "joined"), rkey(R, "back"), rkey(R - 1, "closed"), rkey(R - 1, "lost")});
        slots = v[0] ? stored_int(rkey(R, "joined"), *v[0], 0, 0, kMaxInt) : n;
        const long long back = v[1] ? stored_int(rkey(R, "back"), *v[1], 0, 0, kMaxInt) : 0;
        const long long had = v[2] ? stored_int(rkey(R - 1, "closed"), *v[2], 0, 1, kMaxInt) : 0;
        const long long lost = v[3] ? stored_int(rkey(R - 1, "lost"), *v[3], 0, 0, kMaxInt) : 0;
        full = slots >= cfg_.max_nodes && (back >= had - lost || waited);
      }
      if (!waited) next = std::min(next, *prev_seen + keep_alive_timeout);
    }
    if (full) {
      if (close_at(cfg_.max_nodes, std::max(slots, static_cast<long long>(cfg_.max_nodes))))
        return {cfg_.max_nodes, std::max(slots, static_cast<long long>(cfg_.max_nodes)), true};
    } else if (prev_over && n >= cfg_.min_nodes) {
      if (!min_seen) min_seen = now_();
      const auto call_ends = *min_seen + seconds(cfg_.last_call_timeout_s);
      if (now_() >= call_ends) {
        const long long j = counter(rkey(R, "joined"));
        const long long k = std::min<long long>(j, cfg_.max_nodes);
        if (close_at(k, j)) return {static_cast<int>(k), j, true};
      }
      next = std::min(next, call_ends);
    }
    if (!standing_by && now_() >= deadline) throw RendezvousError(timeout_message(R, since(start)));
    // Wait for the round to close; a node that may close it once the
    // previous round is over waits for that instead.
    const std::string& what = !prev_over && (standing_by || n >= cfg_.min_nodes) ? prev_end : closed;
    const auto left = to_ms(next - now_());
    if (left.count() > 0 && store_.wait(what, std::min(left, standing_by ? standby_slice : kJoinSlice))) {
      if (what != closed) continue;
      const auto c = value(closed);
      if (c) {
        const int count = static_cast<int>(stored_int(closed, *c, 0, 1, cfg_.max_nodes));
        const long long among = words(*c).size() > 2 ? stored_int(closed, *c, 2, count, kMaxInt) : count;
        return {count, among, false};
      }
      continue;
    }
    if (!idle(static_cast<int>(to_ms(next - now_()).count())))
      throw RendezvousError("the launcher went away during the rendezvous");
  }
}

void Rendezvous::assign_ranks(int R, int K, long long J, Clock::time_point until, const std::function<bool(int)>& idle) {
  std::vector<std::string> keys;
  for (long long i = 0; i < J; ++i) keys.push_back(rkey(R, "node/" + std::to_string(i)));
  auto slots = store_.multi_get(keys);
  // A node adds itself, then writes its descriptor: wait for the few that
  // are between the two, one at a time, reading all of those still missing
  // after each (a wait and a read per wave of late writers, not per node).
  while (true) {
    std::vector<int> missing;
    for (int i = 0; i < J; ++i)
      if (!slots[i]) missing.push_back(i);
    if (missing.empty()) break;
    if (!await_key(keys[missing[0]], until, kJoinSlice, idle))
      throw RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id + "): the node that joined round " +
                            std::to_string(R) + " as number " + std::to_string(missing[0] + 1) +
                            " did not say who it is within " + seconds_text(cfg_.close_timeout_s) + " (close_timeout)");
    std::vector<std::string> again;
    for (int i : missing) again.push_back(keys[i]);
    const auto got = store_.multi_get(again);
    for (std::size_t j = 0; j < missing.size(); ++j) slots[missing[j]] = got[j];
  }
  // Who takes part: the nodes of round R-1 that came back first (they keep
  // their node ranks and their workers' state), then the others, the node
  // that hosts the rendezvous store (the --rdzv_endpoint host) first, then
  // in join order, so a first round's node 0 does not depend on which
  // launcher joined first. Beyond K, the rest are the round's spares.
  std::vector<Descriptor> d(J);
  std::vector<int> candidates;
  for (int i = 0; i < J; ++i) {
    if (*slots[i] == kGone) continue;  // a surplus node that left at once
    // Another format's node (an older ddp-launch never reads the format):
    // the round cannot be formed; every node ends, saying why.
    const auto w = words(*slots[i]);
    if (w.size() < 8 || w[7] != kFormat) {
      const Descriptor p = parse_descriptor(*slots[i]);
      abort_mixed(format_mismatch("the node on host " + ddp::visible_text(p.host) + " (pid " + ddp::visible_text(p.pid) +
                                      ") runs",
                                  w, 7));
    }
    d[i] = parse_descriptor(*slots[i]);
    // The numbers that place ranks: read strictly (words 4 to 7).
    d[i].nproc = static_cast<int>(stored_int(keys[i], *slots[i], 3, 1, kMaxInt));
    d[i].last_rank = static_cast<int>(stored_int(keys[i], *slots[i], 4, -1, kMaxInt));
    d[i].store_host = static_cast<int>(stored_int(keys[i], *slots[i], 5, 0, 1));
    d[i].last_round = static_cast<int>(stored_int(keys[i], *slots[i], 6, -1, kMaxRound));
    candidates.push_back(i);
  }
  auto back = [&](int i) { return R > 0 && d[i].last_round == R - 1 && d[i].last_rank >= 0; };
  auto order_key = [&](int i) {
    return std::tuple(back(i) ? 0 : 1, back(i) ? d[i].last_rank : 0, d[i].store_host ? 0 : 1, i);
  };
  std::sort(candidates.begin(), candidates.end(), [&](int a, int b) { return order_key(a) < order_key(b); });
  K = std::min<int>(K, static_cast<int>(candidates.size()));
  const std::vector<int> chosen(candidates.begin(), candidates.begin() + K);
  // Node ranks: in that order; but where newcomers join nodes that came
  // back, those keep their ranks and a newcomer takes the rank of a node
  // that did not come back (a hot spare replaces it).
  std::vector<int> holder(K, -1);
  const bool replacing = std::any_of(chosen.begin(), chosen.end(), back) &&
                         !std::all_of(chosen.begin(), chosen.end(), back);
  std::vector<bool> placed(J, false);
  if (replacing)
    for (int i : chosen)
      if (back(i) && d[i].last_rank < K && holder[d[i].last_rank] < 0) holder[d[i].last_rank] = i, placed[i] = true;
  for (int i : chosen) {
    if (placed[i]) continue;
    *std::find(holder.begin(), holder.end(), -1) = i;
    placed[i] = true;
  }
  // Counted restarts so far: every earlier round that ended by a failure
  // (one read of R short keys) and the job's in-place recoveries (counted
  // in its recovery record: they share --max_restarts); and who
  // held the ranks newcomers take.
  int restarts = 0;
  keys.clear();
  for (int j = 0; j < R; ++j) keys.push_back(rkey(j, "restart"));
  keys.push_back(key("recovery"));
  std::vector<int> replaced_ranks;
  if (replacing)
    for (int rank = 0; rank < K; ++rank)
      if (!back(holder[rank])) {
        replaced_ranks.push_back(rank);
        keys.push_back(rkey(R - 1, "member/" + std::to_string(rank)));
      }
  const auto got = store_.multi_get(keys);
  for (int j = 0; j < R; ++j)
    if (got[j] && got[j]->rfind("1 ", 0) == 0) ++restarts;
  const long long recoveries = counted_recoveries(got[R]);
  restarts += static_cast<int>(recoveries);
  // "<node rank>:<host>:<pid>:<host before>:<pid before>", ',' between.
  std::string replaced;
  for (std::size_t j = 0; j < replaced_ranks.size(); ++j) {
    const auto& before = got[R + 1 + j];
    if (!before) continue;  // a rank round R-1 did not have (the job grew)
    const Descriptor old = parse_descriptor(*before);
    const Descriptor& now = d[holder[replaced_ranks[j]]];
    replaced += (replaced.empty() ? "" : ",") + std::to_string(replaced_ranks[j]) + ":" + now.host + ":" + now.pid +
                ":" + old.host + ":" + old.pid;
  }
  long long world = 0;
  for (int i : chosen) world += d[i].nproc;
  std::vector<std::pair<std::string, std::string>> out;
  long long base = 0;
  for (int rank = 0; rank < K; ++rank) {
    const int slot = holder[rank];
    out.emplace_back(rkey(R, "member/" + std::to_string(rank)), *slots[slot]);
    const std::string place = std::to_string(rank) + " " + std::to_string(base) + " " + std::to_string(world) + " " +
                              std::to_string(restarts) + " " + std::to_string(K) + " " + kFormat + " " +
                              cfg_.launcher_version + " " + std::to_string(recoveries);
    out.emplace_back(rkey(R, "rank/" + std::to_string(slot)), place);
    // By node rank too: a hot spare takes a lost node's (a takeover).
    if (cfg_.hot_spares > 0) out.emplace_back(rkey(R, "place/" + std::to_string(rank)), place);
    base += d[slot].nproc;
  }
  for (std::size_t c = K; c < candidates.size(); ++c) out.emplace_back(rkey(R, "rank/" + std::to_string(candidates[c])), kSpare);
  if (!replaced.empty()) out.emplace_back(rkey(R, "replaced"), replaced);
  store_.multi_set(out);
}

Round Rendezvous::join(const std::function<bool(int)>& idle) {
  const auto start = now_();
  const auto deadline = start + seconds(cfg_.join_timeout_s);
  // The launcher's pid (this helper's parent): the one users see and kill.
  self_ = cfg_.hostname + " " + std::to_string(::getppid()) + " " + cfg_.local_addr + " " + std::to_string(cfg_.nproc) +
          " " + std::to_string(round_ >= 0 ? current_.group_rank : -1) + (cfg_.hosts_store ? " 1 " : " 0 ") +
          std::to_string(round_) + " " + kFormat + " " + cfg_.launcher_version;
  // The run's newest round, or the one after this node's last.
  auto round_of = [&](const std::string& v) { return static_cast<int>(stored_int(key("round"), v, 0, 0, kMaxRound)); };
  int R = round_of(store_.compare_set(key("round"), "", "0"));
  int want = std::max(R, round_ + 1);
  long long slot = 0;  // this node's join position in the round it takes part in (1-based)
  std::string ranks;   // what the closer wrote for this node
  while (true) {
    // Make `want` the run's newest round (someone may be further on already).
    while (R < want) R = round_of(store_.compare_set(key("round"), std::to_string(R), std::to_string(want)));
    const long long n = store_.add(rkey(R, "joined"), 1);
    // A node of the last round says it is back: the round waits for those.
    const bool survivor = round_ >= 0 && R == round_ + 1;
    if (survivor) store_.add(rkey(R, "back"), 1);
    if (cfg_.hot_spares > 0 && R > 0 && !survivor) check_spare_room(R, n);
    store_.set(rkey(R, "node/" + std::to_string(n - 1)), self_);
    const Closed c = await_close(R, n, survivor, start, deadline, idle);
    if (c.took_over) {  // a hot spare in a lost node's place in the running round
      tcpstore_client_.clear();
      return current_;
    }
    if (n > c.slots) {
      want = R + 1;  // late: wait for the next round
      continue;
    }
    const auto close_until = now_() + seconds(cfg_.close_timeout_s);
    if (c.closer) assign_ranks(R, c.nodes, c.slots, close_until, idle);
    const std::string mine = rkey(R, "rank/" + std::to_string(n - 1));
    // A closer that found a node of another format ends the job instead.
    auto ended = [&] {
      if (auto a = value(key("abort"))) {
        saw_abort();
        throw RendezvousError("the job was ended: " + *a);
      }
    };
    if (!await_key(mine, close_until, kJoinSlice, idle, ended))
      throw RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id + "): the node that closed round " +
                            std::to_string(R) + " did not publish the node ranks within " +
                            seconds_text(cfg_.close_timeout_s) + " (close_timeout)");
    ranks = value(mine).value_or("");
    if (ranks == kSpare) {
      want = R + 1;  // a spare of round R: stand by in the next
      continue;
    }
    slot = n;
    break;
  }
  // The round closed: a torchrun node seen meanwhile was a stray.
  tcpstore_client_.clear();
  const auto close_until = now_() + seconds(cfg_.close_timeout_s);
  const std::string mine = rkey(R, "rank/" + std::to_string(slot - 1));
  // An older ddp-launch closed the round (it never reads the format).
  if (const auto w = words(ranks); w.size() < 6 || w[5] != kFormat)
    abort_mixed(format_mismatch("the node that closed round " + std::to_string(R) + " runs", w, 5));
  Round next;
  next.round = R;
  next.group_world_size = static_cast<int>(stored_int(mine, ranks, 4, 1, cfg_.max_nodes));
  next.group_rank = static_cast<int>(stored_int(mine, ranks, 0, 0, next.group_world_size - 1));
  next.base_rank = static_cast<int>(stored_int(mine, ranks, 1, 0, kMaxInt));
  next.world_size = static_cast<int>(stored_int(mine, ranks, 2, 1, kMaxInt));
  next.restart_count = static_cast<int>(stored_int(mine, ranks, 3, 0, kMaxInt));
  recoveries_at_close_ = stored_int(mine, ranks, 7, 0, next.restart_count);
  my_recovery_.clear();
  peer_told_ = 0;
  peer_.reset();
  round_ = R;
  current_ = next;
  // Node rank 0 publishes the workers' store of the round: the port its
  // launcher bound for it (a fresh store each round), else a free one.
  const std::string master = rkey(R, "master");
  if (current_.group_rank == 0) {
    std::string addr = cfg_.local_addr.empty() ? cfg_.hostname : cfg_.local_addr;
    store_.set(master, addr + " " + std::to_string(pick_port_()));
  }
  if (!await_key(master, close_until, kJoinSlice, idle))
    throw RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id + "): node n0 of round " +
                          std::to_string(R) + " did not publish its workers' store within " +
                          seconds_text(cfg_.close_timeout_s) + " (close_timeout)");
  // With the round's replacements (short: a few per failure), one read.
  const auto got = store_.multi_get({master, rkey(R, "replaced")});
  const std::string m = got[0].value_or("");
  current_.master_addr = words(m).empty() ? "" : words(m)[0];
  current_.master_port = static_cast<int>(stored_int(master, m, 1, 1, 65535));
  current_.replaced = got[1].value_or("");
  watch_ring();
  return current_;
}

// A node beyond the job's nodes while round R-1 runs: a hot spare, unless
// --hot_spares of them stand by already. Then it leaves at once (its slot
// marked gone, so no round waits for it) with a line that says what to do:
// more agents than the maximum never close the rendezvous
// (NVIDIA/nvidia-resiliency-ext#348).
void Rendezvous::check_spare_room(int R, long long n) {
  const auto v = store_.multi_get({rkey(R - 1, "end"), rkey(R - 1, "closed")});
  if (v[0] || !v[1]) return;  // round R-1 is over (or not closed): this is a join, not a standby
  const long long running = stored_int(rkey(R - 1, "closed"), *v[1], 0, 1, cfg_.max_nodes);
  // A running round below max_nodes takes newcomers (they restart it).
  const long long room = cfg_.hot_spares + (cfg_.max_nodes - running);
  if (n <= room) return;
  store_.set(rkey(R, "node/" + std::to_string(n - 1)), kGone);
  throw RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id + "): round " +
                        std::to_string(R - 1) + " runs with " + std::to_string(running) + " nodes and " +
                        std::to_string(n - 1 - (cfg_.max_nodes - running)) + " hot spares stand by (--hot_spares " +
                        std::to_string(cfg_.hot_spares) + "); this node is not needed: stop it, or start the job "
                        "with a larger --hot_spares");
}

// The keep-alive ring: this node watches the next node rank, and beats.
void Rendezvous::watch_ring() {
  const int K = current_.group_world_size;
  watched_ = K > 1 ? (current_.group_rank + 1) % K : -1;
  watched_beats_ = -1;
  watched_seen_ = now_();
  watched_read_ = Clock::time_point{};
  last_beat_sent_ = Clock::time_point{};
  abort_seen_count_ = 0;
  takeover_rank_ = -1;
  takeover_.clear();
  takeover_record_.clear();
  heartbeat();
}

void Rendezvous::heartbeat() {
  if (since(last_beat_sent_) < cfg_.keep_alive_interval_s) return;
  store_.add(rkey(round_, "hb/" + std::to_string(current_.group_rank)), 1);
  last_beat_sent_ = now_();
}

std::optional<Stop> Rendezvous::pending_stop() {
  const auto v = store_.multi_get({key("abort"), rkey(round_, "restart"), key("recovery")});
  saw_recovery(v[2]);
  if (v[0]) {
    saw_abort();
    return Stop{Stop::Abort, true, *v[0]};
  }
  if (const auto& r = v[1]) return Stop{Stop::Restart, r->rfind("1 ", 0) == 0, r->substr(2)};
  return std::nullopt;
}

bool Rendezvous::stop_round(const std::string& reason, bool lost) {
  if (store_.compare_set(rkey(round_, "restart"), "", reason) != reason) return false;
  // Counted before the end key is set: a node that comes back has seen the
  // end, so it reads the count too.
  if (lost) store_.add(rkey(round_, "lost"), 1);
  store_.compare_set(rkey(round_, "end"), "", "restart");
  return true;
}

void Rendezvous::stop_round_lost(const std::string& why) { stop_round("1 " + why, true); }

std::optional<std::string> Rendezvous::lost_node() {
  // The peer beats once an interval: looking more often learns nothing.
  if (watched_ < 0 || since(watched_read_) < cfg_.keep_alive_interval_s) return std::nullopt;
  watched_read_ = now_();
  const double limit = cfg_.keep_alive_interval_s * cfg_.keep_alive_max_attempt;
  const long long b = counter(rkey(round_, "hb/" + std::to_string(watched_)));
  if (b != watched_beats_) {
    // A takeover's spare beats the lost node's key: the ring is whole.
    if (takeover_rank_ == watched_ && watched_beats_ >= 0) {
      takeover_rank_ = -1;
      takeover_.clear();
      takeover_record_.clear();
    }
    watched_beats_ = b;
    watched_seen_ = now_();
  } else if (since(watched_seen_) > limit) {
    return node_name(watched_) + " left during round " + std::to_string(round_) + " (no heartbeat for " +
           seconds_text(since(watched_seen_)) + ")";
  }
  return std::nullopt;
}

std::optional<Stop> Rendezvous::tick(double agent_silent_s) {
  const double limit = cfg_.keep_alive_interval_s * cfg_.keep_alive_max_attempt;
  const bool agent_lost = agent_silent_s > limit;
  if (!agent_lost) heartbeat();
  if (auto s = pending_stop()) {
    void_takeover("before the round ended");  // unclaimed: it counts not
    return s;
  }
  std::optional<std::string> why;
  bool counted = true;
  bool lost = false;
  if (agent_lost) {
    lost = true;
    why = node_name(current_.group_rank) + " left during round " + std::to_string(round_) +
          " (its launcher has not answered its rendezvous helper for " + seconds_text(agent_silent_s) +
          ": stopped or hung)";
  } else if (auto gone = lost_node()) {
    lost = true;
    if (takeover_rank_ == watched_) {
      why = *gone + void_takeover("within a keep-alive timeout");
    } else {
      // --recovery in_place with hot spares: a spare takes the lost node's
      // place in this round, and the round goes on.
      const std::string no = post_takeover();
      if (no.empty() && takeover_rank_ == watched_) return std::nullopt;
      why = *gone + no;
    }
  } else if (current_.group_world_size < cfg_.max_nodes && counter(rkey(round_ + 1, "joined")) > 0) {
    if (auto d = value(rkey(round_ + 1, "node/0"))) {
      const Descriptor p = parse_descriptor(*d);
      why = "node " + p.host + " (pid " + p.pid + ") is waiting to join; the job goes on with it in round " +
            std::to_string(round_ + 1);
      counted = false;
    }
  }
  if (!why) return std::nullopt;
  if (lost) stop_round_lost(*why);
  else stop_round((counted ? "1 " : "0 ") + *why);
  return pending_stop();
}

Stop Rendezvous::fail(const std::string& reason) {
  stop_round("1 " + reason);
  void_takeover("before the round ended");  // unclaimed: it counts not
  return *pending_stop();
}

void Rendezvous::saw_abort() {
  if (abort_seen_count_ > 0) return;
  abort_seen_count_ = store_.add(key("abort_seen"), 1);
  // The last of the round's nodes to see it lets the host go.
  if (round_ >= 0 && abort_seen_count_ >= current_.group_world_size) store_.set(key("abort_all_seen"), "1");
}

void Rendezvous::abort(const std::string& reason, const std::function<bool(int)>& idle) {
  store_.compare_set(key("abort"), "", reason);
  // Nodes in the exit barrier wait for the round's end key.
  if (round_ >= 0) store_.compare_set(rkey(round_, "end"), "", "abort");
  saw_abort();
  // The store lives in this process: keep it up until the round's other
  // nodes have read why the job ends (or a while, for nodes that are gone).
  if (!cfg_.hosts_store || round_ < 0 || abort_seen_count_ >= current_.group_world_size) return;
  const auto until = now_() + seconds(std::min(cfg_.close_timeout_s, 10.0));
  try {
    await_key(key("abort_all_seen"), until, kJoinSlice, idle);
  } catch (const RendezvousError&) {
    // The launcher went away: nothing to keep the store up for.
  }
}

std::string Rendezvous::done(const std::function<bool(int)>& idle) {
  const int K = current_.group_world_size;
  const std::string end = rkey(round_, "end");
  if (store_.add(rkey(round_, "done_count"), 1) >= K) store_.compare_set(end, "", "done");
  const auto until = now_() + seconds(cfg_.exit_barrier_timeout_s);
  const auto beat = std::chrono::milliseconds(std::max(1, static_cast<int>(cfg_.keep_alive_interval_s * 1000)));
  std::string note;
  // Between two waits (one keep-alive interval each): this node's
  // heartbeat, and its peer's (a node lost ends the barrier for everyone).
  auto between = [&] {
    heartbeat();
    if (auto lost = lost_node()) {
      stop_round_lost(*lost);
      throw RendezvousError(*lost);
    }
  };
  try {
    if (!await_key(end, until, beat, idle, between)) {
      note = "the other nodes did not finish within " + seconds_text(cfg_.exit_barrier_timeout_s);
    } else if (counter(rkey(round_, "done_count")) < K) {
      if (auto s = pending_stop()) note = s->reason;
    }
  } catch (const RendezvousError& e) {
    if (std::string(e.what()) == "the launcher went away during the rendezvous") return "the launcher went away";
    note = e.what();
  }
  const bool last = store_.add(rkey(round_, "left"), 1) >= K;
  if (last) store_.set(rkey(round_, "all_left"), "1");
  // The store lives in this process: keep it up until the others are through.
  if (cfg_.hosts_store && note.empty() && !last) {
    try {
      await_key(rkey(round_, "all_left"), now_() + seconds(std::min(cfg_.close_timeout_s, 10.0)), kJoinSlice, idle);
    } catch (const RendezvousError&) {
    }
  }
  return note;
}

}  // namespace ddp::rdzv
