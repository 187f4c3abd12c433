#include "chaos_common.h"

#include <cstdlib>
#include <functional>
#include <iostream>
#include <regex>

namespace ddp::test {

std::uint64_t base_seed() {
  static const std::uint64_t seed = [] {
    std::uint64_t s;
    const char* env = std::getenv("DDP_RELIABILITY_SEED");
    if (env && *env) {
      s = std::strtoull(env, nullptr, 10);
    } else {
      std::random_device rd;
      s = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }
    std::cerr << "reliability: seed " << s << " (replay with DDP_RELIABILITY_SEED=" << s << ")" << std::endl;
    return s;
  }();
  return seed;
}

std::mt19937_64 case_rng(const std::string& case_name) {
  return std::mt19937_64(base_seed() ^ std::hash<std::string>{}(case_name));
}

bool long_variant() {
  const char* env = std::getenv("DDP_RELIABILITY_LONG");
  return env && std::string(env) == "1";
}

long env_count(const char* name, long fallback) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  return (end && *end == '\0' && v > 0) ? v : fallback;
}

void print_result(const std::string& case_name, const std::string& outcome, double seconds) {
  const std::uint64_t seed = base_seed();  // prints its line first
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", seconds);
  std::cerr << "RESULT|" << case_name << "|" << seed << "|" << outcome << "|" << buf << std::endl;
}

namespace {
std::optional<int> after_root_cause(const std::string& out, const std::string& pattern) {
  const auto at = out.find("Root cause (earliest failure):");
  if (at == std::string::npos) return std::nullopt;
  std::smatch m;
  const std::string rest = out.substr(at);
  if (!std::regex_search(rest, m, std::regex(pattern))) return std::nullopt;
  return std::stoi(m[1].str());
}
}  // namespace

std::optional<int> root_cause_rank(const std::string& out) { return after_root_cause(out, "\n  rank +: (\\d+)"); }
std::optional<int> root_cause_exit_code(const std::string& out) {
  return after_root_cause(out, "\n  exitcode +: (\\d+)");
}

}  // namespace ddp::test
