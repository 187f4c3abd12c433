#include "ddp/launcher/watch/file_timer.h"

#include "ddp/launcher/base/signal_names.h"
#include "ddp/launcher/base/time_text.h"

#include "ddp/common/ptree_json.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ddp::launcher {
namespace pt = boost::property_tree;

namespace {

// The request is one flat object. Checked before Boost's parser sees the
// line, which recurses once per '[' or '{' (see error_file.cpp).
bool flat_object(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[') {
      return false;
    } else if (c == '{') {
      if (++depth > 1) return false;
    } else if (c == '}') {
      --depth;
    }
  }
  return true;
}

std::optional<long long> whole_number(const std::string& s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  const size_t digits = s[0] == '-' ? 1 : 0;
  if (digits == s.size() || s.find_first_not_of("0123456789", digits) != std::string::npos) return std::nullopt;
  return std::strtoll(s.c_str(), nullptr, 10);
}

std::string quoted_start(const std::string& line) {
  return "'" + (line.size() > 80 ? line.substr(0, 80) + "..." : line) + "'";
}

}  // namespace

std::optional<TimerRequest> parse_timer_request(const std::string& line, std::string& why) {
  const auto bad = [&](const std::string& what) -> std::optional<TimerRequest> {
    why = what + " in " + quoted_start(line);
    return std::nullopt;
  };
  if (!flat_object(line)) return bad("not a flat JSON object");
  pt::ptree tree;
  try {
    std::istringstream in(line);
    pt::read_json(in, tree);
  } catch (const pt::json_parser_error&) {
    return bad("not JSON");
  }
  if (!tree.data().empty() || tree.empty() || tree.front().first.empty()) return bad("not a JSON object");
  const auto field = [&](const char* name) -> std::optional<std::string> {
    const auto it = tree.find(name);
    if (it == tree.not_found()) return std::nullopt;
    return it->second.data();
  };
  TimerRequest r;
  const auto pid = field("pid");
  const auto scope = field("scope_id");
  const auto expiration = field("expiration_time");
  const auto signal = field("signal");
  if (!pid || !scope || !expiration || !signal)
    return bad("a field of pid, scope_id, expiration_time and signal is missing");
  const auto p = whole_number(*pid);
  if (!p || *p <= 0 || *p > INT_MAX) return bad("pid " + *pid + " is not a process id");
  r.pid = static_cast<pid_t>(*p);
  r.scope_id = *scope;
  char* end = nullptr;
  errno = 0;
  r.expiration_time = std::strtod(expiration->c_str(), &end);
  if (expiration->empty() || *end != '\0' || errno == ERANGE || !std::isfinite(r.expiration_time))
    return bad("expiration_time " + *expiration + " is not a number of seconds");
  const auto s = whole_number(*signal);
  if (!s || *s > SIGRTMAX) return bad("signal " + *signal + " is not a signal number");
  r.signal = *s < 0 ? 0 : static_cast<int>(*s);
  return r;
}

std::vector<LineSplitter::Line> LineSplitter::feed(const char* data, size_t n) {
  std::vector<Line> out;
  for (size_t i = 0; i < n;) {
    const char* nl = static_cast<const char*>(std::memchr(data + i, '\n', n - i));
    const size_t len = (nl ? static_cast<size_t>(nl - data) : n) - i;
    if (!discarding_) {
      const size_t room = max_line_ >= partial_.size() ? max_line_ - partial_.size() : 0;
      partial_.append(data + i, std::min(len, room + 1));
      if (partial_.size() > max_line_) {  // keep the start for the warning, drop the rest
        partial_.resize(std::min<size_t>(partial_.size(), 80));
        out.push_back(Line{partial_, true});
        partial_.clear();
        discarding_ = true;
      }
    }
    if (!nl) break;
    if (!discarding_) out.push_back(Line{std::move(partial_), false});
    partial_.clear();
    discarding_ = false;
    i += len + 1;
  }
  return out;
}

bool TimerTable::apply(const TimerRequest& r, double now) {
  const auto key = std::make_pair(r.pid, r.scope_id);
  if (r.release()) {
    scopes_.erase(key);
    return true;
  }
  auto it = scopes_.find(key);
  if (it == scopes_.end()) {
    if (scopes_.size() >= max_scopes_) return false;
    it = scopes_.emplace(key, TimerScope{}).first;
  }
  it->second = TimerScope{r.pid, r.scope_id, r.expiration_time, now, r.signal};
  return true;
}

std::optional<double> TimerTable::next_expiration() const {
  std::optional<double> first;
  for (const auto& [key, s] : scopes_)
    if (!first || s.expiration_time < *first) first = s.expiration_time;
  return first;
}

std::vector<ExpiredPid> TimerTable::take_expired(double now) {
  std::vector<ExpiredPid> out;
  for (const auto& [key, s] : scopes_) {
    if (s.expiration_time > now) continue;
    if (out.empty() || out.back().pid != s.pid) out.push_back(ExpiredPid{s.pid, {}, std::nullopt});
  }
  for (ExpiredPid& e : out) {
    // Every scope of the pid goes, as FileTimerServer clears a reaped pid's;
    // the signal is the first expired one's that has one.
    auto it = scopes_.lower_bound(std::make_pair(e.pid, std::string()));
    while (it != scopes_.end() && it->first.first == e.pid) {
      e.scopes.push_back(it->second);
      it = scopes_.erase(it);
    }
    std::stable_sort(e.scopes.begin(), e.scopes.end(),
                     [](const TimerScope& a, const TimerScope& b) { return a.expiration_time < b.expiration_time; });
    for (const TimerScope& s : e.scopes)
      if (s.expiration_time <= now && s.signal > 0) {
        e.fired = s;
        break;
      }
  }
  return out;
}

void TimerTable::drop_pid(pid_t pid) {
  auto it = scopes_.lower_bound(std::make_pair(pid, std::string()));
  while (it != scopes_.end() && it->first.first == pid) it = scopes_.erase(it);
}

std::string format_expired_scope(const ExpiredScope& e) {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", e.acquired_for_s);
  return "timer scope '" + e.scope_id + "' expired (acquired for " + secs + " s at " + format_time(e.acquired_at) +
         "; sent " + signal_name(e.signal) + ")";
}

}  // namespace ddp::launcher
