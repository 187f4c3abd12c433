#include "ddp/launcher/watch/stall_detector.h"

#include "ddp/launcher/base/rank_list.h"

#include <algorithm>
#include <cstring>
#include <cstdio>
#include <map>
#include <utility>

namespace ddp::launcher {

using Clock = StallDetector::Clock;

namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::string bytes_text(uint64_t b) {
  char buf[32];
  if (b >= 1024 * 1024) std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  else if (b >= 1024) std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(b) / 1024.0);
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string rank_text(const RankProgress& r) {
  return "rank " + std::to_string(r.rank) + " (local_rank " + std::to_string(r.local_rank) + ", pid " +
         std::to_string(r.pid) + ")";
}

// Earlier progress first, then the lower rank.
bool stopped_before(const RankProgress& a, const RankProgress& b) {
  if (a.last_progress != b.last_progress) return a.last_progress < b.last_progress;
  return a.rank < b.rank;
}

// A rank the kernel holds (stopped, else in uninterruptible sleep) cannot
// advance, whatever the others wait for: it is the straggler.
std::optional<StallVerdict> held_rank(const std::vector<RankProgress>& ranks, Clock::time_point now) {
  for (const char* states : {"Tt", "D"}) {
    const RankProgress* best = nullptr;
    for (const RankProgress& r : ranks)
      if (r.state && std::strchr(states, r.state) && (!best || stopped_before(r, *best))) best = &r;
    if (!best) continue;
    StallVerdict v;
    v.straggler = *best;
    v.idle_s = seconds_between(best->last_progress, now);
    const std::string pid = std::to_string(best->pid);
    const std::string held =
        best->state == 'D' ? "is in uninterruptible sleep (state D: a kernel call that does not return, e.g. a "
                             "hung file system or device)"
                           : std::string("is stopped (state ") + best->state +
                                 ": SIGSTOP, SIGTSTP or a debugger; kill -CONT " + pid + " continues it)";
    const std::string where = collective_summary(ranks);
    v.message = rank_text(*best) + " stalled: no progress for " + seconds_text(v.idle_s) + "; " + rank_text(*best) +
                " " + held + (where.empty() ? "" : "; " + where);
    return v;
  }
  return std::nullopt;
}

}  // namespace

// Capped at 30 years: a deadline beyond steady_clock's range would overflow.
StallDetector::StallDetector(double timeout_s) : timeout_s_(std::min(timeout_s, 1e9)) {}

Clock::duration StallDetector::interval() const {
  const double s = std::min(1.0, timeout_s_ / 4);
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

RankProgress* StallDetector::find(int local_rank) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= slots_.size() || !slots_[local_rank]) return nullptr;
  return &*slots_[local_rank];
}

std::vector<RankProgress> StallDetector::ranks() const {
  std::vector<RankProgress> out;
  for (const auto& r : slots_)
    if (r) out.push_back(*r);
  return out;
}

void StallDetector::add(int local_rank, int rank, pid_t pid, Clock::time_point now) {
  if (local_rank < 0) return;
  if (static_cast<size_t>(local_rank) >= slots_.size()) slots_.resize(static_cast<size_t>(local_rank) + 1);
  RankProgress r;
  r.rank = rank;
  r.local_rank = local_rank;
  r.pid = pid;
  r.last_progress = now;
  slots_[local_rank] = r;
}

void StallDetector::remove(int local_rank) {
  if (find(local_rank)) slots_[local_rank].reset();
}

void StallDetector::observe(int local_rank, const std::optional<HeartbeatSnapshot>& hb, double cpu_s,
                            Clock::time_point now) {
  RankProgress* r = find(local_rank);
  if (!r) return;
  r->cpu_s = cpu_s;
  bool advanced = false;
  if (hb) {
    // A runtime worker counts by its heartbeat once it is past its start
    // (loading data, joining the store): before its first collective or
    // step, it is judged like any other process.
    const bool beating = hb->pid != 0 && (hb->collective_started > 0 || hb->step > 0);
    advanced = *hb != r->snapshot || beating != r->heartbeat;
    r->heartbeat = beating;
    r->snapshot = *hb;
  }
  if (!r->heartbeat && cpu_s - r->cpu_base_s >= kMinCpuShare * seconds_between(r->last_progress, now))
    advanced = true;
  if (advanced) {
    r->last_progress = now;
    r->cpu_base_s = cpu_s;
  }
}

void StallDetector::note_output(int local_rank, Clock::time_point now) {
  RankProgress* r = find(local_rank);
  if (!r) return;
  r->last_progress = now;
  r->cpu_base_s = r->cpu_s;
}

Clock::time_point StallDetector::deadline() const {
  Clock::time_point beat = Clock::time_point::max();
  Clock::time_point plain = Clock::time_point::min();
  bool any_plain = false;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  for (const auto& slot : slots_) {
    if (!slot) continue;
    const RankProgress& r = *slot;
    if (r.heartbeat) {
      beat = std::min(beat, r.last_progress + timeout);
    } else {
      any_plain = true;
      plain = std::max(plain, r.last_progress + timeout);
    }
  }
  return any_plain ? std::min(beat, plain) : beat;
}

bool StallDetector::stalled(Clock::time_point now) const {
  return deadline() <= now;
}

std::string collective_summary(const std::vector<RankProgress>& ranks) {
  // Ranks outside a collective, by the last one they finished; ranks in
  // one, by its number and what it is: the group behind comes first. Ranks
  // in one number but different collectives (a barrier against a
  // broadcast) are out of step: one rank called a collective the others did
  // not, and the numbers no longer name the same call.
  std::map<uint64_t, std::vector<int>> finished;
  // (#, kind): sizes may differ between ranks of one call (uneven gathers).
  std::map<std::pair<uint64_t, uint64_t>, std::vector<int>> waiting;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> bytes_of;  // the first rank's
  std::map<uint64_t, int> calls_at;  // how many different collectives share a number
  for (const RankProgress& r : ranks) {
    if (!r.heartbeat) continue;
    if (r.snapshot.in_collective()) {
      const std::pair<uint64_t, uint64_t> key{r.snapshot.collective_started, static_cast<uint64_t>(r.snapshot.kind)};
      auto& rs = waiting[key];
      if (rs.empty()) {
        ++calls_at[key.first];
        bytes_of[key] = r.snapshot.bytes;
      }
      rs.push_back(r.rank);
    } else {
      finished[r.snapshot.collective_finished].push_back(r.rank);
    }
  }
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  for (const auto& [seq, rs] : finished)
    add(ranks_text(rs) + (seq == 0 ? " started no collective yet" : " last finished collective #" + std::to_string(seq)));
  bool out_of_step = false;
  for (const auto& [key, rs] : waiting) {
    const auto& [seq, kind] = key;
    out_of_step |= calls_at[seq] > 1;
    add(ranks_text(rs) + (rs.size() == 1 ? " waits" : " wait") + " in #" + std::to_string(seq) + " (" +
        collective_kind_name(static_cast<CollectiveKind>(kind)) + ", " + bytes_text(bytes_of[key]) + ")");
  }
  if (out_of_step)
    add("the ranks are out of step: one collective number names different calls on different ranks (a rank "
        "called a collective the others did not)");
  return out;
}

StallVerdict decide_stall(const std::vector<RankProgress>& ranks, Clock::time_point now, double timeout_s,
                          bool whole_job_here) {
  if (std::optional<StallVerdict> v = held_rank(ranks, now)) return *v;
  std::vector<const RankProgress*> beat, plain;
  for (const RankProgress& r : ranks) (r.heartbeat ? beat : plain).push_back(&r);
  bool beat_stalled = false;
  for (const RankProgress* r : beat) beat_stalled |= seconds_between(r->last_progress, now) >= timeout_s;

  StallVerdict v;
  std::string why;
  if (beat_stalled || plain.empty()) {
    // A rank that has not entered the collective the others entered last
    // is the one they wait for: the furthest behind (the lowest collective
    // entered), then the first to stop.
    uint64_t newest = 0;
    for (const RankProgress* r : beat) newest = std::max(newest, r->snapshot.collective_started);
    const RankProgress* best = beat.front();
    for (const RankProgress* r : beat) {
      const uint64_t a = r->snapshot.collective_started, b = best->snapshot.collective_started;
      if (a != b ? a < b : stopped_before(*r, *best)) best = r;
    }
    v.straggler = *best;
    why = collective_summary(ranks);
    bool all_in_newest = newest > 0;
    for (const RankProgress* r : beat)
      all_in_newest &= r->snapshot.in_collective() && r->snapshot.collective_started == newest;
    if (all_in_newest && beat.size() == ranks.size())
      why += whole_job_here ? "; no rank is behind: the collective itself hangs"
                            : "; no rank here is behind: the rank they wait for is on another node, or the collective "
                              "itself hangs";
  } else {
    // No heartbeats: a rank whose main thread is not blocked in a futex
    // (where a collective waits) while others are, else the first to stop.
    std::vector<const RankProgress*> candidates, waiters;
    for (const RankProgress* r : plain)
      if (r->in_futex) (*r->in_futex ? waiters : candidates).push_back(r);
    const bool split = !candidates.empty() && !waiters.empty();
    if (!split) candidates = plain;
    const RankProgress* best = candidates.front();
    for (const RankProgress* r : candidates)
      if (stopped_before(*r, *best)) best = r;
    v.straggler = *best;
    why = "no rank used CPU time or wrote output that the launcher sees";
    if (split) {
      std::vector<int> w;
      for (const RankProgress* r : waiters) w.push_back(r->rank);
      why += "; " + ranks_text(w) + (w.size() == 1 ? " waits" : " wait") + " in a futex (where a collective waits), rank " +
             std::to_string(best->rank) + " does not";
    } else {
      bool first = true;
      for (const RankProgress* r : plain)
        if (r != best && r->last_progress <= best->last_progress) first = false;
      why += first && plain.size() > 1 ? "; rank " + std::to_string(best->rank) + " stopped first"
                                       : plain.size() > 1 ? "; the ranks stopped together: named the lowest" : "";
    }
  }
  v.idle_s = seconds_between(v.straggler.last_progress, now);
  v.message = rank_text(v.straggler) + " stalled: no progress for " + seconds_text(v.idle_s) +
              (why.empty() ? "" : "; " + why);
  return v;
}

}  // namespace ddp::launcher
