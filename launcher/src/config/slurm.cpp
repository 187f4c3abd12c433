#include "ddp/launcher/config/slurm.h"

#include "ddp/common/parse.h"

#include <algorithm>
#include <cctype>

namespace ddp::launcher {

namespace {

constexpr long long kMaxCount = 1 << 20;

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// One range of a bracket ("08-10" or "012") as the numbers' texts, padded to
// the low bound's width as Slurm does.
void expand_range(const std::string& r, const std::string& var, const std::string& list,
                  std::vector<std::string>& out, size_t max_hosts) {
  auto bad = [&](const std::string& why) {
    return UsageError(var + "=" + list + ": '" + r + "' " + why + "; expected a Slurm hostlist such as node[01-04,07],login1");
  };
  const auto dash = r.find('-');
  const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
  if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18 || hi.size() > 18)
    throw bad("is not a number or a range of numbers (a-b)");
  const unsigned long long a = std::stoull(lo), b = std::stoull(hi);
  if (a > b) throw bad("is a range that runs backwards");
  if (b - a >= max_hosts || out.size() + (b - a + 1) > max_hosts)
    throw bad("makes more than " + std::to_string(max_hosts) + " host names");
  const size_t width = lo.size();
  for (unsigned long long n = a; n <= b; ++n) {
    std::string digits = std::to_string(n);
    if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
    out.push_back(std::move(digits));
  }
}

// One host expression without top-level commas: prefix[ranges]middle[ranges]...
std::vector<std::string> expand_one(const std::string& expr, const std::string& var, const std::string& list,
                                    size_t max_hosts) {
  std::vector<std::string> names = {""};
  size_t i = 0;
  while (i < expr.size()) {
    const size_t open = expr.find('[', i);
    const std::string literal = expr.substr(i, open == std::string::npos ? std::string::npos : open - i);
    for (std::string& n : names) n += literal;
    if (open == std::string::npos) break;
    const size_t close = expr.find(']', open);
    std::vector<std::string> numbers;
    const std::string inner = expr.substr(open + 1, close == std::string::npos ? std::string::npos : close - open - 1);
    if (close == std::string::npos || inner.empty() || inner.find('[') != std::string::npos)
      throw UsageError(var + "=" + list + ": unbalanced or empty brackets in '" + expr +
                       "'; expected a Slurm hostlist such as node[01-04,07],login1");
    size_t start = 0;
    while (true) {
      const size_t comma = inner.find(',', start);
      expand_range(inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start), var, list,
                   numbers, max_hosts);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (names.size() * numbers.size() > max_hosts)
      throw UsageError(var + "=" + list + ": makes more than " + std::to_string(max_hosts) + " host names");
    std::vector<std::string> product;
    product.reserve(names.size() * numbers.size());
    for (const std::string& n : names)
      for (const std::string& d : numbers) product.push_back(n + d);
    names = std::move(product);
    i = close + 1;
  }
  return names;
}

std::optional<std::string> get(const EnvMap& env, const char* name) {
  if (auto it = env.find(name); it != env.end()) return it->second;
  return std::nullopt;
}

// A SLURM_* integer that must be there; the message names it and its value.
int slurm_int(const EnvMap& env, const char* name, long long lo, const std::string& needed_for) {
  auto v = get(env, name);
  if (!v)
    throw UsageError(std::string(name) + " is not set, but " + needed_for +
                     " needs it; run ddp-launch under srun inside the allocation, or give the option yourself");
  try {
    return static_cast<int>(parse_int(*v, name, lo, kMaxCount));
  } catch (const std::invalid_argument&) {
    throw UsageError(std::string(name) + "=" + *v + ": not an integer from " + std::to_string(lo) + " to " +
                     std::to_string(kMaxCount) + " (Slurm sets it; unset or fix it, or give the option yourself)");
  }
}

// The node list the processes of this step run on: the step's inside srun,
// else the job's.
std::pair<std::string, std::string> node_list(const EnvMap& env) {
  for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})
    if (auto v = get(env, var)) return {var, *v};
  throw UsageError("SLURM_JOB_NODELIST is not set inside Slurm job " + env.at("SLURM_JOB_ID") +
                   "; give --master_addr HOST");
}

std::string first_host(const EnvMap& env) {
  const auto [var, list] = node_list(env);
  return expand_hostlist(list, var).front();
}

// Tasks on node `node_id` of this step (SLURM_STEP_TASKS_PER_NODE inside srun).
int tasks_on_node(const EnvMap& env, int node_id, int nnodes) {
  const char* var = env.count("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  auto v = get(env, var);
  if (!v) throw UsageError(std::string("SLURM_TASKS_PER_NODE is not set; run ddp-launch under srun"));
  const auto per_node = expand_tasks_per_node(*v, var);
  if (static_cast<int>(per_node.size()) != nnodes)
    throw UsageError(std::string(var) + "=" + *v + " lists " + std::to_string(per_node.size()) +
                     " nodes, but SLURM_NNODES is " + std::to_string(nnodes));
  return per_node[static_cast<size_t>(node_id)];
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& var, size_t max_hosts) {
  std::vector<std::string> hosts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    else if (c == ']') --depth;
    else if (std::isspace(static_cast<unsigned char>(c)))
      throw UsageError(var + "=" + list + ": white space in a host list; expected a Slurm hostlist such as node[01-04,07],login1");
    if (depth < 0 || depth > 1)
      throw UsageError(var + "=" + list + ": unbalanced brackets; expected a Slurm hostlist such as node[01-04,07],login1");
    if (c != ',' || depth != 0) continue;
    const std::string expr = list.substr(start, i - start);
    if (expr.empty())
      throw UsageError(var + "=" + list + ": empty host name; expected a Slurm hostlist such as node[01-04,07],login1");
    for (std::string& h : expand_one(expr, var, list, max_hosts - hosts.size())) hosts.push_back(std::move(h));
    if (hosts.size() > max_hosts)
      throw UsageError(var + "=" + list + ": makes more than " + std::to_string(max_hosts) + " host names");
    start = i + 1;
  }
  if (depth != 0)
    throw UsageError(var + "=" + list + ": unbalanced brackets; expected a Slurm hostlist such as node[01-04,07],login1");
  return hosts;
}

std::vector<int> expand_tasks_per_node(const std::string& spec, const std::string& var) {
  std::vector<int> out;
  auto bad = [&](const std::string& part) {
    return UsageError(var + "=" + spec + ": '" + part + "' is not a task count N or N(xM) such as 2(x3),1");
  };
  size_t start = 0;
  while (true) {
    const size_t comma = spec.find(',', start);
    const std::string part = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::string count = part, times = "1";
    if (auto paren = part.find("(x"); paren != std::string::npos) {
      if (part.back() != ')') throw bad(part);
      count = part.substr(0, paren);
      times = part.substr(paren + 2, part.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(times) || count.size() > 7 || times.size() > 7) throw bad(part);
    const int n = std::stoi(count), m = std::stoi(times);
    if (n < 1 || m < 1 || out.size() + static_cast<size_t>(m) > static_cast<size_t>(kMaxCount)) throw bad(part);
    out.insert(out.end(), static_cast<size_t>(m), n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int slurm_master_port(long long job_id) { return 10000 + static_cast<int>(job_id % 20000); }

bool in_slurm_allocation(const EnvMap& env) {
  auto v = get(env, "SLURM_JOB_ID");
  return v && !v->empty();
}

HostCounts probe_host_with_slurm(bool with_gpus, const EnvMap& env) {
  if (!with_gpus || !in_slurm_allocation(env)) return probe_host(with_gpus);
  std::optional<int> gpus;
  if (auto v = get(env, "SLURM_GPUS_ON_NODE")) {
    try {
      gpus = static_cast<int>(parse_int(*v, "SLURM_GPUS_ON_NODE", 0, kMaxCount));
    } catch (const std::invalid_argument&) {
      throw UsageError("SLURM_GPUS_ON_NODE=" + *v + ": not a GPU count (Slurm sets it; unset or fix it, or give " +
                       "--nproc_per_node N)");
    }
  }
  if (auto v = get(env, "CUDA_VISIBLE_DEVICES")) {
    // "0,1,3" or UUIDs; empty hides every GPU. The count is what CUDA shows.
    const int listed = v->empty() ? 0 : static_cast<int>(std::count(v->begin(), v->end(), ',')) + 1;
    gpus = gpus ? std::min(*gpus, listed) : listed;
  }
  if (!gpus) return probe_host(with_gpus);
  HostCounts h = probe_host(false);
  h.gpus = *gpus;
  return h;
}

namespace {

void resolve_slurm_layout(LaunchPlan& cfg, const EnvMap& env) {
  LaunchOptions& o = cfg.opts;
  if (!in_slurm_allocation(env) || o.standalone) {
    if (o.slurm_tasks)
      throw UsageError(std::string(o.standalone ? "--standalone" : "SLURM_JOB_ID is not set") +
                       ": --slurm_tasks needs srun's task variables; start it as "
                       "srun --ntasks-per-node=G ddp-launch --slurm_tasks ... inside a Slurm allocation");
    return;
  }
  const std::string job_text = env.at("SLURM_JOB_ID");
  long long job_id = 0;
  try {
    job_id = parse_int(job_text, "SLURM_JOB_ID", 0, (1LL << 62));
  } catch (const std::invalid_argument&) {
    throw UsageError("SLURM_JOB_ID=" + job_text + ": not a job id (Slurm sets it; unset it outside an allocation)");
  }
  auto given = [&](const char* name) { return o.given.count(name) > 0; };

  // c10d: the rendezvous gives node ranks and the workers' store; Slurm
  // only says how many nodes to wait for when --nnodes is not given.
  if (o.rdzv.elastic()) {
    if (o.slurm_tasks)
      throw UsageError("--slurm_tasks takes every rank from srun, --rdzv_backend c10d from the rendezvous: "
                       "give one of them (srun --ntasks-per-node=1 ddp-launch --rdzv_backend c10d ... for c10d)");
    if (!given("nnodes"))
      o.nnodes = o.rdzv.min_nodes = o.rdzv.max_nodes = slurm_int(env, "SLURM_NNODES", 1, "--nnodes from Slurm");
    return;
  }

  // Per node: what the user left open.
  if (!given("nnodes")) o.nnodes = slurm_int(env, "SLURM_NNODES", 1, "--nnodes from Slurm");
  if (!given("node_rank")) o.node_rank = slurm_int(env, "SLURM_NODEID", 0, "--node_rank from Slurm");
  if (o.node_rank >= o.nnodes)
    throw UsageError("node rank " + std::to_string(o.node_rank) + " (" +
                     (given("node_rank") ? "--node_rank" : "SLURM_NODEID") + ") must be below the node count " +
                     std::to_string(o.nnodes) + " (" + (given("nnodes") ? "--nnodes" : "SLURM_NNODES") + ")");
  if (!given("master_addr")) {
    auto addr = get(env, "MASTER_ADDR");
    o.master_addr = addr && !addr->empty() ? *addr : first_host(env);
  }
  if (!given("master_port")) {
    if (auto port = get(env, "MASTER_PORT")) {
      try {
        o.master_port = static_cast<int>(parse_int(*port, "MASTER_PORT", 1, 65535));
      } catch (const std::invalid_argument&) {
        throw UsageError("MASTER_PORT=" + *port + ": not a port from 1 to 65535; fix or unset it (then the port is " +
                         std::to_string(slurm_master_port(job_id)) + ", from the job id)");
      }
    } else {
      o.master_port = slurm_master_port(job_id);
    }
  }

  // Per rank: explicitly, or when srun started exactly one task per rank.
  const bool in_step = env.count("SLURM_STEP_ID") > 0;
  std::optional<int> ntasks;
  if (in_step || o.slurm_tasks) ntasks = slurm_int(env, "SLURM_NTASKS", 1, "a launch inside srun");
  bool per_rank = o.slurm_tasks;
  if (per_rank && !in_step)
    throw UsageError("--slurm_tasks: SLURM_STEP_ID is not set, so this is the batch script itself, one process; "
                     "start it as srun ddp-launch --slurm_tasks ... (one task per rank)");
  if (!per_rank && ntasks && *ntasks > 1 && static_cast<long long>(o.nnodes) * cfg.nproc == *ntasks) per_rank = true;

  if (!per_rank) {
    // Several per-node launchers on one node would all start ranks
    // node_rank*nproc.. : refuse instead of a job whose ranks collide.
    if (in_step && *ntasks > 1 && !given("node_rank")) {
      const int nodes = slurm_int(env, "SLURM_NNODES", 1, "a launch inside srun");
      const int node = slurm_int(env, "SLURM_NODEID", 0, "a launch inside srun");
      if (node >= nodes)
        throw UsageError("SLURM_NODEID=" + std::to_string(node) + " must be below SLURM_NNODES=" + std::to_string(nodes));
      const int here = tasks_on_node(env, node, nodes);
      if (here > 1)
        throw UsageError("srun started " + std::to_string(here) + " tasks on this node (SLURM_NTASKS=" +
                         std::to_string(*ntasks) + "), and each would start ranks " +
                         std::to_string(static_cast<long long>(o.node_rank) * cfg.nproc) + ".." +
                         std::to_string(static_cast<long long>(o.node_rank + 1) * cfg.nproc - 1) +
                         "; run one ddp-launch per node (srun --ntasks-per-node=1) or one per rank (--slurm_tasks)");
    }
    return;
  }

  TaskRank t;
  t.group_world_size = slurm_int(env, "SLURM_NNODES", 1, "--slurm_tasks");
  t.group_rank = slurm_int(env, "SLURM_NODEID", 0, "--slurm_tasks");
  if (t.group_rank >= t.group_world_size)
    throw UsageError("SLURM_NODEID=" + std::to_string(t.group_rank) + " must be below SLURM_NNODES=" +
                     std::to_string(t.group_world_size));
  t.local_world_size = tasks_on_node(env, t.group_rank, t.group_world_size);
  t.local_rank = slurm_int(env, "SLURM_LOCALID", 0, "--slurm_tasks");
  const int procid = slurm_int(env, "SLURM_PROCID", 0, "--slurm_tasks");
  if (procid >= *ntasks || t.local_rank >= t.local_world_size)
    throw UsageError("SLURM_PROCID=" + std::to_string(procid) + " / SLURM_LOCALID=" + std::to_string(t.local_rank) +
                     " must be below SLURM_NTASKS=" + std::to_string(*ntasks) + " / the tasks on this node (" +
                     std::to_string(t.local_world_size) + ")");
  // Options that contradict srun's layout are errors, not silently replaced.
  if (given("nproc_per_node") && cfg.nproc != 1 && cfg.nproc != t.local_world_size)
    throw UsageError("--nproc_per_node " + std::to_string(cfg.nproc) + " with --slurm_tasks: each srun task runs one "
                     "worker and srun started " + std::to_string(t.local_world_size) +
                     " on this node; drop --nproc_per_node or set it to that");
  if (given("nnodes") && o.nnodes != t.group_world_size)
    throw UsageError("--nnodes " + std::to_string(o.nnodes) + " with --slurm_tasks: srun's tasks run on " +
                     std::to_string(t.group_world_size) + " nodes (SLURM_NNODES); drop --nnodes");
  if (given("node_rank") && o.node_rank != t.group_rank)
    throw UsageError("--node_rank " + std::to_string(o.node_rank) + " with --slurm_tasks: this task is on node " +
                     std::to_string(t.group_rank) + " (SLURM_NODEID); drop --node_rank");
  o.task = t;
  o.nnodes = *ntasks;
  o.node_rank = procid;
  cfg.nproc = 1;
  // torch.distributed.launch style: the one worker's --local_rank is srun's
  // local id, not 0.
  if (cfg.command.legacy_local_rank) {
    cfg.command.args.insert(cfg.command.args.begin() + static_cast<long>(cfg.command.local_rank_pos),
                            (cfg.command.local_rank_dash ? "--local-rank=" : "--local_rank=") +
                                std::to_string(cfg.opts.virtual_local_rank ? 0 : t.local_rank));
    cfg.command.legacy_local_rank = false;
  }
}

}  // namespace

void resolve_slurm(LaunchPlan& cfg, const EnvMap& env) {
  resolve_slurm_layout(cfg, env);
  check_free_port(cfg.opts);  // the node count may be Slurm's now
}

}  // namespace ddp::launcher
