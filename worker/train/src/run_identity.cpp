#include "ddp/train/run_identity.h"

#include <cstdio>
#include <sstream>

namespace ddp::train {
namespace {

// Shortest text that reads back as the same double (0.001, not 0.00100000000000000002).
std::string exact(double v) {
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::stod(buf) == v) break;
  }
  return buf;
}

}  // namespace

RunIdentity run_identity(const TrainOptions& o) {
  return {{"seed", std::to_string(o.seed)},
          {"learning_rate", exact(o.learning_rate)},
          {"batch_size", std::to_string(o.batch_size)},
          {"no_shuffle", o.no_shuffle ? "1" : "0"},
          {"max_steps", std::to_string(o.max_steps)},
          {"lr_factor", exact(o.lr_factor)},
          {"lr_patience", std::to_string(o.lr_patience)}};
}

std::string format_identity(const RunIdentity& id) {
  std::string out;
  for (const auto& [k, v] : id) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

RunIdentity parse_identity(const std::string& text) {
  RunIdentity id;
  std::istringstream in(text);
  for (std::string pair; in >> pair;) {
    const auto eq = pair.find('=');
    if (eq != std::string::npos && eq > 0) id[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return id;
}

std::vector<IdentityChange> identity_changes(const RunIdentity& saved, const RunIdentity& current) {
  std::vector<IdentityChange> out;
  for (const auto& [k, v] : current) {
    const auto it = saved.find(k);
    const std::string was = it == saved.end() ? "(none)" : it->second;
    if (was != v) out.push_back({k, was, v});
  }
  return out;
}

std::string describe_changes(const std::vector<IdentityChange>& changes) {
  std::string out;
  for (const auto& c : changes)
    out += (out.empty() ? "" : ", ") + ("--" + c.option + " " + c.saved + " (this run: " + c.current + ")");
  return out;
}

}  // namespace ddp::train
