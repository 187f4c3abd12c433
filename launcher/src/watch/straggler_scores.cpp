#include "ddp/launcher/watch/straggler_scores.h"

#include "ddp/launcher/base/number_text.h"

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

// The share of a step spent blocked in collectives. Shares, not sums, are
// compared: a first step that holds the start-up (seconds, no wait) would
// otherwise outweigh a window of ordinary steps.
double wait_share(const StepRecord& s) {
  const double t = s.seconds();
  return t > 0 ? std::min(1.0, static_cast<double>(s.wait_ns) * 1e-9 / t) : 0.0;
}

std::string ms_text(double ms) { return ms >= 10 ? fixed_text(ms, 0) + " ms" : fixed_text(ms, 1) + " ms"; }

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

std::optional<StragglerVerdict> StragglerScores::evaluate(uint64_t now_ns, const std::vector<WindowRank>& others,
                                                          bool may_name) {
  if (!window_due(now_ns)) return std::nullopt;
  window_start_ns_ = now_ns;
  ++windows_;
  struct Seen {
    WindowRank w;
    std::optional<double> best;  // its best window (this node's ranks only)
  };
  std::vector<Seen> seen;
  local_.clear();
  std::set<int> here;
  for (auto& [rank, r] : ranks_) {
    here.insert(rank);
    if (static_cast<int>(r.window.size()) >= opts_.min_steps) {
      std::vector<double> work, waited;
      for (const StepRecord& s : r.window) {
        work.push_back(s.work_seconds() * 1e3);
        waited.push_back(wait_share(s));
      }
      const double m = median_of(work);
      r.last_window_ms = m;
      if (!r.best_window_ms || m < *r.best_window_ms) r.best_window_ms = m;
      WindowRank w{r.rank, r.local_rank, "", m, median_of(waited), static_cast<int>(r.window.size())};
      local_.push_back(w);
      seen.push_back({w, r.best_window_ms});
    }
    r.window.clear();
  }
  for (const WindowRank& w : others)
    if (!here.count(w.rank) && w.steps >= opts_.min_steps) seen.push_back({w, std::nullopt});
  last_.reset();
  if (seen.size() < 2) return std::nullopt;
  double fastest = seen.front().w.work_ms;
  for (const Seen& s : seen) fastest = std::min(fastest, s.w.work_ms);
  const Seen* worst = &seen.front();
  for (const Seen& s : seen)
    if (s.w.work_ms > worst->w.work_ms) worst = &s;
  std::vector<double> others_wait;
  for (const Seen& s : seen)
    if (&s != worst) others_wait.push_back(s.w.wait_share);
  StragglerVerdict v;
  v.rank = worst->w.rank;
  v.local_rank = worst->w.local_rank;
  v.host = worst->w.host;
  v.work_ms = worst->w.work_ms;
  v.fastest_ms = fastest;
  v.score = worst->w.work_ms > 0 ? fastest / worst->w.work_ms : 1.0;
  v.individual_score = worst->w.work_ms > 0 && worst->best ? *worst->best / worst->w.work_ms : 1.0;
  v.others_wait_share = median_of(others_wait);
  v.ranks = static_cast<int>(seen.size());
  last_ = v;
  if (!may_name || opts_.threshold <= 0 || v.score >= opts_.threshold) return std::nullopt;
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

namespace {

std::string clean_host(std::string h) {
  for (char& c : h)
    if (c == ';' || c == '|' || c == ',' || c == ':' || c == ' ' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      c = '_';
  return h.empty() ? "?" : h;
}

}  // namespace

std::string format_node_window(const std::string& host, const std::vector<WindowRank>& ranks) {
  std::string out = clean_host(host) + ";";
  for (size_t i = 0; i < ranks.size(); ++i) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "%s%d:%d:%.3f:%.4f:%d", i ? "," : "", ranks[i].rank, ranks[i].local_rank,
                  ranks[i].work_ms, ranks[i].wait_share, ranks[i].steps);
    out += buf;
  }
  return out;
}

std::vector<WindowRank> parse_job_windows(const std::string& text, int world_size) {
  std::vector<WindowRank> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find('|', at), text.size());
    const std::string node = text.substr(at, end - at);
    at = end + 1;
    const size_t semi = node.find(';');
    if (semi == std::string::npos || semi == 0) continue;
    const std::string host = clean_host(node.substr(0, semi));  // the store's text: anyone's
    size_t p = semi + 1;
    while (p < node.size()) {
      const size_t comma = std::min(node.find(',', p), node.size());
      WindowRank w;
      w.host = host;
      char tail = 0;
      if (std::sscanf(node.substr(p, comma - p).c_str(), "%d:%d:%lf:%lf:%d%c", &w.rank, &w.local_rank, &w.work_ms,
                      &w.wait_share, &w.steps, &tail) == 5 &&
          w.rank >= 0 && w.rank < world_size && w.local_rank >= 0 && w.work_ms >= 0 && std::isfinite(w.work_ms) && std::isfinite(w.wait_share))
        out.push_back(w);
      p = comma + 1;
    }
  }
  return out;
}

std::string format_straggler_line(const StragglerVerdict& v, const std::string& host) {
  return "ddp-launch: rank " + std::to_string(v.rank) + " (host " + (v.host.empty() ? host : v.host) + ", local_rank " +
         std::to_string(v.local_rank) + ") is a straggler: " + ms_text(v.work_ms) +
         " of its own work a step against " + ms_text(v.fastest_ms) + " on the fastest of " +
         std::to_string(v.ranks) + " ranks (score " + fixed_text(v.score, 2) + "); the other ranks wait " +
         fixed_text(v.others_wait_share * 100, 0) + "% of each step for it";
}

}  // namespace ddp::launcher
