#include "ddp/launcher/config/log_spec.h"

#include "ddp/common/parse.h"

#include <cctype>
#include <stdexcept>

namespace ddp::launcher {

namespace {

constexpr int kMaxLocalRank = 1 << 16;

std::string std_hint() {
  return "give 0 (none), 1 (stdout), 2 (stderr), 3 (both), or per local rank like 0:1,1:2";
}

int parse_bits(const std::string& v, const std::string& text, const std::string& what) {
  if (v.size() == 1 && v[0] >= '0' && v[0] <= '3') return v[0] - '0';
  throw std::invalid_argument(what + ": '" + text + "' is not a stream choice; " + std_hint());
}

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Walks a template like Python's string.Template: calls on_text for literal
// text and on_name for each placeholder. A lone '$' is literal text.
template <typename Text, typename Name>
void walk_template(const std::string& t, Text on_text, Name on_name) {
  size_t i = 0;
  while (i < t.size()) {
    const size_t dollar = t.find('$', i);
    if (dollar == std::string::npos) {
      on_text(t.substr(i));
      return;
    }
    on_text(t.substr(i, dollar - i));
    size_t j = dollar + 1;
    if (j < t.size() && t[j] == '$') {
      on_text("$");
      i = j + 1;
    } else if (j < t.size() && t[j] == '{') {
      const size_t close = t.find('}', j);
      if (close == std::string::npos) {
        on_text(t.substr(dollar));
        return;
      }
      on_name(t.substr(j + 1, close - j - 1));
      i = close + 1;
    } else if (j < t.size() && is_ident_start(t[j])) {
      size_t k = j;
      while (k < t.size() && is_ident(t[k])) ++k;
      on_name(t.substr(j, k - j));
      i = k;
    } else {
      on_text("$");
      i = j;
    }
  }
}

bool known_name(const std::string& n) { return n == "role_name" || n == "rank" || n == "local_rank"; }

}  // namespace

int StdSpec::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? kStdNone : it->second;
}

bool StdSpec::any() const {
  if (per_rank.empty()) return all != kStdNone;
  for (const auto& [rank, bits] : per_rank)
    if (bits != kStdNone) return true;
  return false;
}

StdSpec parse_std_spec(const std::string& text, const std::string& what) {
  StdSpec s;
  if (text.find(':') == std::string::npos) {
    s.all = parse_bits(text, text, what);
    return s;
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0)
      throw std::invalid_argument(what + ": '" + text + "': '" + item + "' is not LOCAL_RANK:STREAMS; " + std_hint());
    int rank = 0;
    try {
      rank = static_cast<int>(parse_int(item.substr(0, colon), "local rank", 0, kMaxLocalRank));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(what + ": '" + text + "': '" + item.substr(0, colon) +
                                  "' is not a local rank; " + std_hint());
    }
    if (s.per_rank.count(rank))
      throw std::invalid_argument(what + ": '" + text + "' names local rank " + std::to_string(rank) + " twice");
    s.per_rank[rank] = parse_bits(item.substr(colon + 1), text, what);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return s;
}

std::set<int> parse_rank_filter(const std::string& text, const std::string& what) {
  std::set<int> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    try {
      out.insert(static_cast<int>(parse_int(item, "local rank", 0, kMaxLocalRank)));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(what + ": '" + text +
                                  "' is not a list of local ranks; give them comma-separated, e.g. 0 or 0,2");
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<std::string> parse_filter_list(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  std::string item;
  auto end_item = [&] {
    if (item.empty())
      throw std::invalid_argument(what + " '" + text + "': an empty filter would copy every line; drop the extra "
                                  "comma (write ',,' for a comma inside a filter)");
    out.push_back(item);
    item.clear();
  };
  // Left to right as Python's str.replace(",,", ...): "a,,,b" is "a," and "b".
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      item += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      item += ',';
      ++i;
    } else {
      end_item();
    }
  }
  end_item();
  return out;
}

void check_prefix_template(const std::string& tmpl, const std::string& what) {
  walk_template(
      tmpl, [](const std::string&) {},
      [&](const std::string& name) {
        if (!known_name(name))
          throw std::invalid_argument(what + ": '" + tmpl + "' has an unknown placeholder '" + name +
                                      "'; use ${role_name}, ${rank} or ${local_rank} ($$ for a dollar sign)");
      });
}

std::string expand_prefix(const std::string& tmpl, const std::string& role, int rank, int local_rank) {
  std::string out;
  walk_template(
      tmpl, [&](const std::string& text) { out += text; },
      [&](const std::string& name) {
        if (name == "role_name") out += role;
        else if (name == "rank") out += std::to_string(rank);
        else if (name == "local_rank") out += std::to_string(local_rank);
        else out += "${" + name + "}";  // checked at parse time; kept as written
      });
  return out;
}

OutputPlan plan_output(const LogOptions& logs, int local_rank) {
  const int tee = logs.tee.for_rank(local_rank);
  const int redirect = logs.redirects.for_rank(local_rank) | tee;  // a tee'd stream is redirected too
  const bool shown = !logs.ranks_filter || logs.ranks_filter->count(local_rank) > 0;
  auto target = [&](int bit) {
    if (redirect & bit) return (tee & bit) && shown ? StreamTarget::Tee : StreamTarget::File;
    return shown ? StreamTarget::Console : StreamTarget::Null;
  };
  return {target(kStdOut), target(kStdErr)};
}

}  // namespace ddp::launcher

namespace ddp::launcher {

bool tees_to_console(const LogOptions& logs, int nproc, int bit) {
  for (int lr = 0; lr < nproc; ++lr) {
    const OutputPlan p = plan_output(logs, lr);
    if ((bit == kStdOut ? p.out : p.err) == StreamTarget::Tee) return true;
  }
  return false;
}

std::string duplicate_filters_warning(const LogOptions& logs, int nproc) {
  std::string out;
  auto check = [&](const std::vector<std::string>& filters, int bit, const char* option, const char* stream,
                   const char* tee) {
    if (filters.empty() || tees_to_console(logs, nproc, bit)) return;
    out += std::string("ddp-launch: warning: ") + option + " copies tee'd " + stream + " lines, but no rank's " +
           stream + " is tee'd to the console (give --tee " + tee + " or 3); nothing is copied\n";
  };
  check(logs.dup_stdout_filters, kStdOut, "--duplicate_stdout_filters", "stdout", "1");
  check(logs.dup_stderr_filters, kStdErr, "--duplicate_stderr_filters", "stderr", "2");
  return out;
}

}  // namespace ddp::launcher
