#include "rendezvous.h"

#include <algorithm>
#include <sstream>
#include <unistd.h>

namespace ddp::rdzv {

namespace {

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string seconds_text(double s) {
  std::ostringstream o;
  o << static_cast<long long>(s + 0.5) << " s";
  return o.str();
}

// "host pid addr nproc last_rank store_host" (last_rank: the node's rank in
// the last round it took part in, -1 for none; store_host: 1 when its helper
// hosts the rendezvous store).
struct Descriptor {
  std::string host, pid, addr;
  int nproc = 1;
  int last_rank = -1;
  int store_host = 0;
};
Descriptor parse_descriptor(const std::string& s) {
  Descriptor d;
  std::istringstream in(s);
  in >> d.host >> d.pid >> d.addr >> d.nproc >> d.last_rank >> d.store_host;
  return d;
}

}  // namespace

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

std::string Rendezvous::share_steps(const std::string& payload) {
  if (round_ < 0) return "";
  store_.set(rkey(round_, "steps/" + std::to_string(current_.group_rank)), payload);
  std::string all;
  for (int i = 0; i < current_.group_world_size; ++i) {
    auto v = value(rkey(round_, "steps/" + std::to_string(i)));
    if (!v || v->empty()) continue;
    all += (all.empty() ? "" : "|") + *v;
  }
  return all;
}

int Rendezvous::tick_ms() const {
  return static_cast<int>(std::clamp(cfg_.keep_alive_interval_s * 1000 / 4, 50.0, 500.0));
}

std::string Rendezvous::node_name(int rank) const {
  const Descriptor d = parse_descriptor(members_.at(rank));
  return "node n" + std::to_string(rank) + " (pid " + d.pid + ", host " + d.host + ")";
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
  // Who of this node's last round never came back.
  std::vector<std::string> here;
  for (long long i = 0; i < joined; ++i)
    if (auto d = value(rkey(round, "node/" + std::to_string(i)))) {
      const Descriptor p = parse_descriptor(*d);
      here.push_back(p.host + " " + p.pid);
    }
  for (std::size_t i = 0; i < last_members_.size(); ++i) {
    const Descriptor p = parse_descriptor(last_members_[i]);
    if (std::find(here.begin(), here.end(), p.host + " " + p.pid) == here.end())
      m << "; node n" << i << " (pid " << p.pid << ", host " << p.host << ") of round " << round_
        << " did not come back";
  }
  return m.str();
}

Round Rendezvous::join(const std::function<bool(int)>& idle) {
  const auto start = now_();
  const auto deadline = start + seconds(cfg_.join_timeout_s);
  if (!members_.empty()) last_members_ = members_;
  members_.clear();
  // The run's newest round, or the one after this node's last.
  int R = std::stoi(store_.compare_set(key("round"), "", "0"));
  R = std::max(R, round_ + 1);
  // The launcher's pid (this helper's parent): the one users see and kill.
  const std::string self = cfg_.hostname + " " + std::to_string(::getppid()) + " " + cfg_.local_addr + " " +
                           std::to_string(cfg_.nproc) + " " + std::to_string(round_ >= 0 ? current_.group_rank : -1) +
                           (cfg_.hosts_store ? " 1" : " 0");
  long long slot = 0;  // this node's join position in the round it takes part in (1-based)
  while (true) {
    // Make R the run's newest round (someone may be further on already).
    int cur = std::stoi(store_.get(key("round")));
    while (cur < R)
      cur = std::stoi(store_.compare_set(key("round"), std::to_string(cur), std::to_string(R)));
    R = cur;
    const long long n = store_.add(rkey(R, "joined"), 1);
    store_.set(rkey(R, "node/" + std::to_string(n - 1)), self);
    std::optional<Clock::time_point> min_seen;
    while (!store_.check(rkey(R, "closed"))) {
      if (auto a = value(key("abort"))) {
        saw_abort();
        throw RendezvousError("the job was ended: " + *a);
      }
      if (R > 0) {
        const std::string prev_done = rkey(R - 1, "done_count");
        const auto prev_closed = value(rkey(R - 1, "closed"));
        if (prev_closed && counter(prev_done) >= std::stoll(*prev_closed))
          throw RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id +
                                "): the job already finished in round " + std::to_string(R - 1) +
                                "; start a new job with another --rdzv_id");
      }
      if (now_() >= deadline) throw RendezvousError(timeout_message(R, since(start)));
      const long long k = counter(rkey(R, "joined"));
      // A round opens only after the previous one has ended for all its
      // nodes (its restart key is set): a late node must not start alone.
      const bool prev_over = R == 0 || store_.check(rkey(R - 1, "restart"));
      if (prev_over && k >= cfg_.max_nodes) {
        store_.compare_set(rkey(R, "closed"), "", std::to_string(cfg_.max_nodes));
      } else if (prev_over && k >= cfg_.min_nodes) {
        if (!min_seen) min_seen = now_();
        if (since(*min_seen) >= cfg_.last_call_timeout_s)
          store_.compare_set(rkey(R, "closed"), "", std::to_string(k));
      }
      if (!idle(100)) throw RendezvousError("the launcher went away during the rendezvous");
    }
    const int K = std::stoi(store_.get(rkey(R, "closed")));
    if (n <= K) {
      slot = n;
      round_ = R;
      current_ = Round{};
      current_.round = R;
      current_.group_world_size = K;
      break;
    }
    ++R;  // late: wait for the next round
  }
  // Node ranks: the nodes of earlier rounds keep their order (rank 0 stays
  // where its checkpoints are); newcomers follow, the node that hosts the
  // rendezvous store (the --rdzv_endpoint host) first, then in join order,
  // so a first round's node 0 does not depend on which launcher joined
  // first. Every node computes the same from the same descriptors.
  std::vector<std::string> slots;
  for (int i = 0; i < current_.group_world_size; ++i)
    slots.push_back(store_.get(rkey(R, "node/" + std::to_string(i))));
  std::vector<int> order(slots.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  auto rank_key = [&](int slot_index) {
    const Descriptor d = parse_descriptor(slots[slot_index]);
    return std::pair(d.last_rank < 0 ? 1 << 30 : d.last_rank, d.store_host ? 0 : 1);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rank_key(a) < rank_key(b); });
  for (std::size_t i = 0; i < order.size(); ++i) {
    members_.push_back(slots[order[i]]);
    if (order[i] == slot - 1) current_.group_rank = static_cast<int>(i);
  }
  current_.world_size = 0;
  for (int i = 0; i < current_.group_world_size; ++i) {
    const int np = parse_descriptor(members_[i]).nproc;
    if (i < current_.group_rank) current_.base_rank += np;
    current_.world_size += np;
  }
  // Counted restarts so far: every earlier round that ended by a failure.
  current_.restart_count = 0;
  for (int j = 0; j < R; ++j)
    if (auto r = value(rkey(j, "restart")); r && r->rfind("1 ", 0) == 0) ++current_.restart_count;
  // Node rank 0 hosts the workers' store on a fresh port each round.
  const std::string master = rkey(R, "master");
  if (current_.group_rank == 0) {
    std::string addr = cfg_.local_addr.empty() ? cfg_.hostname : cfg_.local_addr;
    store_.set(master, addr + " " + std::to_string(pick_port_()));
  }
  const auto close_ms = std::chrono::duration_cast<std::chrono::milliseconds>(seconds(cfg_.close_timeout_s));
  if (!store_.wait(master, close_ms))
    throw RendezvousError("rendezvous at " + cfg_.endpoint + " (rdzv_id " + cfg_.run_id + "): node n0 of round " +
                          std::to_string(R) + " did not publish its workers' store within " +
                          seconds_text(cfg_.close_timeout_s) + " (close_timeout)");
  std::istringstream m(store_.get(master));
  m >> current_.master_addr >> current_.master_port;
  beats_.assign(members_.size(), -1);
  beat_seen_.assign(members_.size(), now_());
  last_beat_sent_ = Clock::time_point{};
  heartbeat();
  return current_;
}

void Rendezvous::heartbeat() {
  if (since(last_beat_sent_) < cfg_.keep_alive_interval_s) return;
  store_.add(rkey(round_, "hb/" + std::to_string(current_.group_rank)), 1);
  last_beat_sent_ = now_();
}

std::optional<Stop> Rendezvous::pending_stop() {
  if (auto a = value(key("abort"))) {
    saw_abort();
    return Stop{Stop::Abort, true, *a};
  }
  if (auto r = value(rkey(round_, "restart"))) return Stop{Stop::Restart, r->rfind("1 ", 0) == 0, r->substr(2)};
  return std::nullopt;
}

std::optional<std::string> Rendezvous::lost_node() {
  const double limit = cfg_.keep_alive_interval_s * cfg_.keep_alive_max_attempt;
  for (int i = 0; i < static_cast<int>(members_.size()); ++i) {
    if (i == current_.group_rank || store_.check(rkey(round_, "done/" + std::to_string(i)))) continue;
    const long long b = counter(rkey(round_, "hb/" + std::to_string(i)));
    if (b != beats_[i]) {
      beats_[i] = b;
      beat_seen_[i] = now_();
    } else if (since(beat_seen_[i]) > limit) {
      return node_name(i) + " left during round " + std::to_string(round_) + " (no heartbeat for " +
             seconds_text(since(beat_seen_[i])) + ")";
    }
  }
  return std::nullopt;
}

std::optional<Stop> Rendezvous::tick(double agent_silent_s) {
  const double limit = cfg_.keep_alive_interval_s * cfg_.keep_alive_max_attempt;
  const bool agent_lost = agent_silent_s > limit;
  if (!agent_lost) heartbeat();
  if (auto s = pending_stop()) return s;
  std::optional<std::string> why;
  bool counted = true;
  if (agent_lost) {
    why = node_name(current_.group_rank) + " left during round " + std::to_string(round_) +
          " (its launcher has not answered its rendezvous helper for " + seconds_text(agent_silent_s) +
          ": stopped or hung)";
  } else if (auto lost = lost_node()) {
    why = *lost;
  } else if (current_.group_world_size < cfg_.max_nodes && counter(rkey(round_ + 1, "joined")) > 0) {
    if (auto d = value(rkey(round_ + 1, "node/0"))) {
      const Descriptor p = parse_descriptor(*d);
      why = "node " + p.host + " (pid " + p.pid + ") is waiting to join; the job goes on with it in round " +
            std::to_string(round_ + 1);
      counted = false;
    }
  }
  if (!why) return std::nullopt;
  store_.compare_set(rkey(round_, "restart"), "", (counted ? "1 " : "0 ") + *why);
  return pending_stop();
}

Stop Rendezvous::fail(const std::string& reason) {
  store_.compare_set(rkey(round_, "restart"), "", "1 " + reason);
  return *pending_stop();
}

void Rendezvous::saw_abort() {
  if (abort_seen_) return;
  abort_seen_ = true;
  store_.add(key("abort_seen"), 1);
}

void Rendezvous::abort(const std::string& reason, const std::function<bool(int)>& idle) {
  store_.compare_set(key("abort"), "", reason);
  saw_abort();
  // The store lives in this process: keep it up until the round's other
  // nodes have read why the job ends (or a while, for nodes that are gone).
  const long long others = static_cast<long long>(members_.size());
  const auto until = now_() + seconds(std::min(cfg_.close_timeout_s, 10.0));
  while (cfg_.hosts_store && counter(key("abort_seen")) < others && now_() < until)
    if (!idle(50)) break;
}

std::string Rendezvous::done(const std::function<bool(int)>& idle) {
  const int K = current_.group_world_size;
  store_.set(rkey(round_, "done/" + std::to_string(current_.group_rank)), "1");
  store_.add(rkey(round_, "done_count"), 1);
  const auto start = now_();
  std::string note;
  while (counter(rkey(round_, "done_count")) < K) {
    if (auto s = pending_stop()) {
      note = s->reason;
      break;
    }
    if (auto lost = lost_node()) {
      note = *lost;
      break;
    }
    if (since(start) >= cfg_.exit_barrier_timeout_s) {
      note = "the other nodes did not finish within " + seconds_text(cfg_.exit_barrier_timeout_s);
      break;
    }
    heartbeat();
    if (!idle(tick_ms())) return "the launcher went away";
  }
  store_.add(rkey(round_, "left"), 1);
  // The store lives in this process: keep it up until the others are through.
  const auto until = now_() + seconds(std::min(cfg_.close_timeout_s, 10.0));
  while (cfg_.hosts_store && note.empty() && counter(rkey(round_, "left")) < K && now_() < until)
    if (!idle(50)) break;
  return note;
}

}  // namespace ddp::rdzv
