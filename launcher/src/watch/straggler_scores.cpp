#include "ddp/launcher/watch/straggler_scores.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ddp::launcher {

namespace {

// Per rank, at most this many steps are kept for the whole-attempt
// quantiles: beyond it every second one is dropped and every second one
// kept from then on (an even thinning, so the quantiles stay unbiased).
constexpr size_t kKeptSteps = 1 << 16;

void keep(std::vector<double>& v) {
  if (v.size() < kKeptSteps) return;
  size_t j = 0;
  for (size_t i = 0; i < v.size(); i += 2) v[j++] = v[i];
  v.resize(j);
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// The share of a step spent blocked in collectives. Shares, not sums, are
// compared: a first step that holds the start-up (seconds, no wait) would
// otherwise outweigh a window of ordinary steps.
double wait_share(const StepRecord& s) {
  const double t = s.seconds();
  return t > 0 ? std::min(1.0, static_cast<double>(s.wait_ns) * 1e-9 / t) : 0.0;
}

std::string ms_text(double ms) { return ms >= 10 ? fixed(ms, 0) + " ms" : fixed(ms, 1) + " ms"; }

}  // namespace

double quantile_of(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - (p > 0 ? 1 : 0));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t n = v.size();
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2), v.end());
  const double hi = v[n / 2];
  if (n % 2) return hi;
  return (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n / 2))) / 2;
}

StragglerScores::StragglerScores(StragglerOptions o) : opts_(o) {}

void StragglerScores::add(const StepRecord& s) {
  Rank& r = ranks_[s.rank];
  r.rank = s.rank;
  r.local_rank = s.local_rank;
  if (r.steps == 0) r.first_ns = s.start_ns;
  r.last_ns = std::max(r.last_ns, s.end_ns);
  ++r.steps;
  if (r.seen++ % r.thin == 0) {
    r.step_s.push_back(s.seconds());
    r.work_s.push_back(s.work_seconds());
    r.wait_share.push_back(wait_share(s));
    if (r.step_s.size() >= kKeptSteps) {
      keep(r.step_s);
      keep(r.work_s);
      keep(r.wait_share);
      r.thin *= 2;
    }
  }
  r.window.push_back(s);
  if (window_start_ns_ == 0) window_start_ns_ = std::max<uint64_t>(s.start_ns, 1);
}

std::optional<StragglerVerdict> StragglerScores::evaluate(uint64_t now_ns) {
  if (window_start_ns_ == 0 || now_ns < window_start_ns_ + static_cast<uint64_t>(opts_.window_s * 1e9)) return std::nullopt;
  window_start_ns_ = now_ns;
  struct Seen {
    Rank* r;
    double work_ms, wait_share;
  };
  std::vector<Seen> seen;
  for (auto& [rank, r] : ranks_) {
    if (static_cast<int>(r.window.size()) >= opts_.min_steps) {
      std::vector<double> work, waited;
      for (const StepRecord& s : r.window) {
        work.push_back(s.work_seconds() * 1e3);
        waited.push_back(wait_share(s));
      }
      const double m = median_of(work);
      r.last_window_ms = m;
      if (!r.best_window_ms || m < *r.best_window_ms) r.best_window_ms = m;
      seen.push_back({&r, m, median_of(waited)});
    }
    r.window.clear();
  }
  last_.reset();
  if (seen.size() < 2) return std::nullopt;
  double fastest = seen.front().work_ms;
  for (const Seen& s : seen) fastest = std::min(fastest, s.work_ms);
  const Seen* worst = &seen.front();
  for (const Seen& s : seen)
    if (s.work_ms > worst->work_ms) worst = &s;
  std::vector<double> others_wait;
  for (const Seen& s : seen)
    if (&s != worst) others_wait.push_back(s.wait_share);
  StragglerVerdict v;
  v.rank = worst->r->rank;
  v.local_rank = worst->r->local_rank;
  v.work_ms = worst->work_ms;
  v.fastest_ms = fastest;
  v.score = worst->work_ms > 0 ? fastest / worst->work_ms : 1.0;
  v.individual_score = worst->work_ms > 0 && worst->r->best_window_ms ? *worst->r->best_window_ms / worst->work_ms : 1.0;
  v.others_wait_share = median_of(others_wait);
  v.ranks = static_cast<int>(seen.size());
  last_ = v;
  if (opts_.threshold <= 0 || v.score >= opts_.threshold) return std::nullopt;
  auto named = named_at_ns_.find(v.rank);
  if (named != named_at_ns_.end() && now_ns < named->second + static_cast<uint64_t>(opts_.repeat_s * 1e9))
    return std::nullopt;
  named_at_ns_[v.rank] = now_ns;
  return v;
}

std::vector<RankStepStats> StragglerScores::totals() const {
  std::vector<RankStepStats> out;
  double fastest = 0;
  for (const auto& [rank, r] : ranks_) {
    if (r.steps == 0) continue;
    RankStepStats s;
    s.rank = r.rank;
    s.local_rank = r.local_rank;
    s.steps = r.steps;
    const double span = static_cast<double>(r.last_ns - r.first_ns) * 1e-9;
    s.steps_per_s = span > 0 ? static_cast<double>(r.steps) / span : 0;
    s.step_ms_median = median_of(r.step_s) * 1e3;
    s.step_ms_p90 = quantile_of(r.step_s, 0.9) * 1e3;
    s.work_ms_median = median_of(r.work_s) * 1e3;
    s.wait_share = median_of(r.wait_share);
    s.individual_score =
        r.best_window_ms && r.last_window_ms && *r.last_window_ms > 0 ? *r.best_window_ms / *r.last_window_ms : 1.0;
    if (out.empty() || s.work_ms_median < fastest) fastest = s.work_ms_median;
    out.push_back(s);
  }
  for (RankStepStats& s : out) s.relative_score = s.work_ms_median > 0 ? std::min(1.0, fastest / s.work_ms_median) : 1.0;
  return out;
}

std::string format_straggler_line(const StragglerVerdict& v, const std::string& host) {
  return "ddp-launch: rank " + std::to_string(v.rank) + " (host " + host + ", local_rank " +
         std::to_string(v.local_rank) + ") is a straggler: " + ms_text(v.work_ms) +
         " of its own work a step against " + ms_text(v.fastest_ms) + " on the fastest of " +
         std::to_string(v.ranks) + " ranks (score " + fixed(v.score, 2) + "); the other ranks wait " +
         fixed(v.others_wait_share * 100, 0) + "% of each step for it";
}

}  // namespace ddp::launcher
