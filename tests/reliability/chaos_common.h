#pragma once
// Small pieces the reliability cases share: the seed every random choice
// comes from (printed, and set with DDP_RELIABILITY_SEED to replay a run),
// the long variant switch (DDP_RELIABILITY_LONG=1), the result lines that
// scripts/reliability-report collects into docs/reliability.md, and reading
// the launcher's failure report.

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>

namespace ddp::test {

// DDP_RELIABILITY_SEED when set, else a fresh random seed; printed once.
std::uint64_t base_seed();
// A generator for one case: base_seed() mixed with the case's name.
std::mt19937_64 case_rng(const std::string& case_name);
// DDP_RELIABILITY_LONG=1: the longer variants (more rounds, more launches).
bool long_variant();
// An unsigned integer from the environment, or `fallback`.
long env_count(const char* name, long fallback);

// "RESULT|case|seed|outcome|seconds" on stderr, one line.
void print_result(const std::string& case_name, const std::string& outcome, double seconds);

// The rank the launcher's failure report names as root cause, if any.
std::optional<int> root_cause_rank(const std::string& launcher_output);
// Its "exitcode   : N" line.
std::optional<int> root_cause_exit_code(const std::string& launcher_output);

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace ddp::test
