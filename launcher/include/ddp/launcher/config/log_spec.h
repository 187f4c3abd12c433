#pragma once
// What happens to each worker's stdout and stderr: torchrun's --redirects,
// --tee, --log_dir, --local_ranks_filter and log line prefix, parsed from
// their strings and turned into one plan per local rank. Pure (no files, no
// processes): options.cpp parses with these functions, the supervisor asks
// plan_output() per worker, and tests check both directly.
// Semantics follow torchrun 2.x (elastic/multiprocessing/api.py,
// DefaultLogsSpecs): a tee'd stream is also a redirected one (file and
// console); with --local_ranks_filter, a rank outside the filter keeps its
// files but shows nothing on the console (a stream that was not redirected
// goes to /dev/null).

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ddp::launcher {

// Bit set of streams, torchrun's Std: 0 none, 1 stdout, 2 stderr, 3 both.
enum StdBits : int { kStdNone = 0, kStdOut = 1, kStdErr = 2, kStdAll = 3 };

// One value for every local rank ("3") or one per local rank ("0:1,1:2";
// ranks not named get 0).
struct StdSpec {
  int all = kStdNone;
  std::map<int, int> per_rank;  // used when non-empty
  int for_rank(int local_rank) const;
  bool any() const;  // some rank has a stream set
};

// `what` names the option as the user gave it (e.g. "-t" or "PET_TEE=4") for
// the message. Throws std::invalid_argument naming the value.
StdSpec parse_std_spec(const std::string& text, const std::string& what);

// "0,2" -> {0, 2}. Throws std::invalid_argument naming the value.
std::set<int> parse_rank_filter(const std::string& text, const std::string& what);

// Checks a log line prefix template: ${role_name}, ${rank}, ${local_rank}
// (or $role_name, ...) and $$ for a dollar. Throws std::invalid_argument
// naming an unknown ${name}.
void check_prefix_template(const std::string& tmpl, const std::string& what);
// The prefix for one worker; the default is torchrun's "[${role_name}${local_rank}]:".
std::string expand_prefix(const std::string& tmpl, const std::string& role, int rank, int local_rank);
constexpr const char* kDefaultPrefixTemplate = "[${role_name}${local_rank}]:";

// --duplicate_stdout_filters "apple,orange": substrings, any of which copies
// a tee'd line to <attempt>/filtered_stdout.log. As torchrun's: ',,' is a
// comma inside a filter ("a,,b" is the one filter "a,b"). "" is no filter.
// Throws std::invalid_argument for an empty filter inside a list ("a,"),
// which torchrun would take as matching every line.
std::vector<std::string> parse_filter_list(const std::string& text, const std::string& what);

struct LogOptions {
  std::string dir;                            // --log_dir; "" none given
  std::string dir_source;                     // how it was given, for messages ("--log-dir /x", "PET_LOG_DIR=/x")
  StdSpec redirects;                          // --redirects / -r
  StdSpec tee;                                // --tee / -t
  std::optional<std::set<int>> ranks_filter;  // --local_ranks_filter; nullopt: every rank
  std::string prefix_template = kDefaultPrefixTemplate;
  std::vector<std::string> dup_stdout_filters;  // --duplicate_stdout_filters; empty: none
  std::vector<std::string> dup_stderr_filters;  // --duplicate_stderr_filters

  // Whether a per-run log directory is needed (files to write, or one given).
  bool needs_dir() const { return !dir.empty() || redirects.any() || tee.any(); }
};

// Where one stream of one worker goes.
enum class StreamTarget {
  Console,  // the launcher's own stdout/stderr, inherited (no pipe, no copy)
  File,     // only the log file
  Tee,      // the log file and the launcher's console, lines prefixed
  Null,     // /dev/null (a rank outside --local_ranks_filter, not redirected)
};

struct OutputPlan {
  StreamTarget out = StreamTarget::Console;
  StreamTarget err = StreamTarget::Console;
};

OutputPlan plan_output(const LogOptions& logs, int local_rank);

// Whether some local rank's stream `bit` (kStdOut or kStdErr) is tee'd to the
// console, which --duplicate_*_filters copy from.
bool tees_to_console(const LogOptions& logs, int nproc, int bit);
// One warning line per --duplicate_*_filters that copies nothing because no
// rank's stream is tee'd to the console (torchrun then leaves an empty
// file); "" when none.
std::string duplicate_filters_warning(const LogOptions& logs, int nproc);

}  // namespace ddp::launcher
