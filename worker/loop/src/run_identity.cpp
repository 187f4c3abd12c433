#include "ddp/loop/run_identity.h"

#include <cctype>
#include <cstdio>
#include <sstream>

namespace ddp::loop {
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
  RunIdentity id = {{"seed", std::to_string(o.seed)},
          {"learning_rate", exact(o.learning_rate)},
          {"batch_size", std::to_string(o.batch_size)},
          {"no_shuffle", o.no_shuffle ? "1" : "0"},
          {"max_steps", std::to_string(o.max_steps)},
          {"lr_factor", exact(o.lr_factor)},
          {"lr_patience", std::to_string(o.lr_patience)}};
  // Options added since: only when not at their defaults, so a run on the
  // defaults has the identity its checkpoints always recorded.
  if (o.lr_schedule != "plateau") id["lr_schedule"] = o.lr_schedule;
  if (o.warmup_steps > 0) id["warmup_steps"] = std::to_string(o.warmup_steps);
  if (o.total_steps > 0) id["total_steps"] = std::to_string(o.total_steps);
  if (o.accumulate_batches > 1) id["accumulate_batches"] = std::to_string(o.accumulate_batches);
  if (o.grad_clip_norm > 0) id["grad_clip_norm"] = exact(o.grad_clip_norm);
  id.insert(o.program_identity.begin(), o.program_identity.end());
  return id;
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
  // A key only the checkpoint has: an option at its default now that the
  // identity leaves out when it is (run_identity).
  for (const auto& [k, v] : saved)
    if (!current.count(k)) out.push_back({k, v, "(default)"});
  return out;
}

std::string describe_changes(const std::vector<IdentityChange>& changes) {
  std::string out;
  for (const auto& c : changes)
    out += (out.empty() ? "" : ", ") + ("--" + c.option + " " + c.saved + " (this run: " + c.current + ")");
  return out;
}

std::string describe_resume_effect(const std::vector<IdentityChange>& changes, double checkpoint_lr) {
  std::string out;
  for (const auto& c : changes) {
    out += out.empty() ? "" : ", ";
    if (c.option == "learning_rate")
      out += "--learning_rate " + exact(checkpoint_lr) + " from the checkpoint (the " + c.current + " given is not used)";
    else
      out += "--" + c.option + " " + c.current + " (was " + c.saved + ")";
  }
  return out;
}

std::string launch_directory(const std::string& error_file) {
  std::size_t pos = error_file.size();
  while ((pos = error_file.rfind("/attempt_", pos)) != std::string::npos) {
    const std::size_t digit = pos + 9;
    if (pos > 0 && digit < error_file.size() && std::isdigit(static_cast<unsigned char>(error_file[digit])))
      return error_file.substr(0, pos);
    if (pos == 0) break;
    --pos;
  }
  return "";
}

}  // namespace ddp::loop
