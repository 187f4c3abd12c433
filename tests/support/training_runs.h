#pragma once
// Reading what a training program left behind, for the end-to-end tests of
// ddp-train and ddp-text: metrics.jsonl lines and their numbers, and how far
// two weight files (--save_final) are apart. Header-only; needs LibTorch and
// ddp_worker (load_weights), so only the torch test binaries include it.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "ddp/worker/checkpoint.h"
#include "test_support.h"

namespace ddp::test {

// ddp-launch --nproc_per_node=N PROGRAM ARGS with a fresh port, one intra-op
// thread per worker (2 workers on a 2-core test machine) and the launcher's
// TMPDIR in a directory removed when the test process ends (a failed launch
// keeps the run directory its report names).
inline ProcResult launch_training(const std::string& program, int nproc, const std::vector<std::string>& args,
                                  const std::map<std::string, std::string>& env, int max_restarts, double timeout_s) {
  std::vector<std::string> argv = {bin_path("ddp-launch"), "--nproc_per_node=" + std::to_string(nproc),
                                   "--master_port=" + std::to_string(free_port()),
                                   "--max_restarts=" + std::to_string(max_restarts), bin_path(program)};
  argv.insert(argv.end(), args.begin(), args.end());
  auto merged = env;
  merged.emplace("OMP_NUM_THREADS", "1");
  static TempDir launcher_tmp;
  merged.emplace("TMPDIR", launcher_tmp.path());
  return run(argv, merged, timeout_s);
}

inline std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// The number after "key": in a JSON line (REQUIREs that it is there).
inline double json_number(const std::string& line, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\": ?([-0-9.eE+]+)");
  REQUIRE(std::regex_search(line, m, re));
  return std::stod(m[1].str());
}

// Largest ||a - b|| / ||b|| over the tensors of two weight files, which must
// hold the same names and shapes (`expected_tensors` of them, when given).
inline double max_relative_difference(const std::string& a_path, const std::string& b_path,
                                      std::size_t expected_tensors = 0) {
  auto a = ddp::worker::load_weights(a_path);
  auto b = ddp::worker::load_weights(b_path);
  REQUIRE(a.size() == b.size());
  if (expected_tensors > 0) REQUIRE(a.size() == expected_tensors);
  double worst = 0;
  for (const auto& item : b) {
    const at::Tensor* other = a.find(item.key());
    REQUIRE(other != nullptr);
    REQUIRE(other->sizes() == item.value().sizes());
    const double rel =
        (*other - item.value()).norm().item<double>() / std::max(1e-12, item.value().norm().item<double>());
    worst = std::max(worst, rel);
  }
  return worst;
}

}  // namespace ddp::test
