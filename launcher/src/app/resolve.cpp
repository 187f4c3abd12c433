#include "ddp/launcher/app/resolve.h"

#include "ddp/launcher/base/own_programs.h"

#include "ddp/common/host_resolve.h"
#include "ddp/common/output_file.h"
#include "ddp/launcher/config/invocation.h"
#include "ddp/launcher/config/numa_binding.h"
#include "ddp/launcher/config/slurm.h"
#include "ddp/launcher/config/worker_env.h"
#include "ddp/launcher/output/log_dir.h"
#include "ddp/launcher/process/limits.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp::launcher {

namespace {

// A --summary_json the run could not write is found now, not after hours.
// --python_heartbeat: the workers' PYTHONPATH with the heartbeat module's
// sitecustomize and package first (python/, installed beside ddp-launch as
// <prefix>/share/ddp-launch/python).
std::string python_heartbeat_path(const EnvMap& env) {
  const std::string root = program_beside_self("../share/ddp-launch/python");
  struct stat st;
  if (::stat((root + "/site/sitecustomize.py").c_str(), &st) != 0 ||
      ::stat((root + "/ddp_launch/heartbeat.py").c_str(), &st) != 0)
    throw UsageError("--python_heartbeat: the Python heartbeat module is not installed beside ddp-launch (looked in " +
                     root + "); reinstall ddp-launch, or leave the option out");
  auto old = env.find("PYTHONPATH");
  return root + "/site:" + root + (old == env.end() || old->second.empty() ? "" : ":" + old->second);
}

// Also for --trace_file's path.
void check_summary_path(const std::string& path, const std::string& given_as, const std::string& example = "summary.json") {
  if (path.empty()) return;
  // A device, a FIFO or a symlink (/dev/null, /dev/stdout) is written
  // through, not replaced (ddp/common/output_file.h): it is the path itself
  // that must be writable, not its directory.
  if (ddp::output_way(path) == ddp::OutputWay::WriteThrough) {
    if (const std::string why = ddp::planted_link_reason(path); !why.empty())
      throw UsageError(given_as + ": will not write through '" + path + "': " + why +
                       "; remove the link or give another path");
    if (::access(path.c_str(), W_OK) != 0)
      throw UsageError(given_as + ": cannot write to '" + path + "': " + std::strerror(errno) +
                       "; give a path you can write");
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      throw UsageError(given_as + ": '" + path + "' is a directory; give a file path, e.g. " +
                       (path.back() == '/' ? path : path + "/") + example);
    return;
  }
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError(given_as + ": cannot write in '" + dir + "': " + std::strerror(errno) +
                     "; give a path in an existing, writable directory");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw UsageError(given_as + ": '" + path + "' is a directory; give a file path, e.g. " +
                     (path.back() == '/' ? path : path + "/") + example);
}

// The file a path writes: its realpath, or its directory's and its name
// when it does not exist yet. "" for a device or a FIFO (/dev/stdout,
// /dev/null): written through, two outputs there are the user's choice.
std::string written_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return "";
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    std::string r(real);
    std::free(real);
    return r;
  }
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  char* real = ::realpath(dir.c_str(), nullptr);
  if (!real) return path;
  std::string r(real);
  std::free(real);
  return (r == "/" ? "" : r) + "/" + path.substr(slash == std::string::npos ? 0 : slash + 1);
}

// --trace_file and --summary_json to one file: the second written would
// replace the first at the run's end, silently. Refused now.
void check_distinct_outputs(const LaunchOptions& o) {
  if (o.trace_file.empty() || o.summary_json.empty()) return;
  const std::string file = written_file(o.trace_file);
  if (file.empty() || file != written_file(o.summary_json)) return;
  throw UsageError(o.trace_file_source + " and " + o.summary_json_source + " are the same file (" + file +
                   "): one would replace the other at the end; give each its own path");
}

// Static rendezvous: an address that does not resolve fails now, with the
// same resolver call the workers would make (c10d would retry it for the
// whole timeout). A temporary resolver failure is left to the workers.
void check_master_addr(const LaunchOptions& o) {
  if (o.standalone || o.rdzv.elastic()) return;
  const std::string err = ddp::host_resolve_error(o.master_addr);
  if (err.empty()) return;
  const std::string given = o.master_addr_source.empty() ? "master address " + o.master_addr : o.master_addr_source;
  throw UsageError(given + ": the host does not resolve (" + err + "); give rank 0's node as an IP address or a "
                   "name this machine resolves (check the spelling, DNS, /etc/hosts)");
}

// c10d rendezvous: the same one-time check for --rdzv_endpoint's host, which
// the store client would otherwise wait on for the whole join_timeout.
void check_rdzv_endpoint(const LaunchOptions& o) {
  if (o.standalone || !o.rdzv.elastic() || o.rdzv.host.empty()) return;
  const std::string err = ddp::host_resolve_error(o.rdzv.host);
  if (err.empty()) return;
  throw UsageError("--rdzv_endpoint " + o.rdzv.host + ": the host does not resolve (" + err +
                   "); give the node that hosts the rendezvous as an IP address or a name this machine resolves "
                   "(check the spelling, DNS, /etc/hosts)");
}

}  // namespace

std::optional<LaunchPlan> resolve_launch(const std::vector<std::string>& args, const EnvMap& env, bool as_torchrun,
                                         std::ostream& out, std::ostream& notes) {
  LaunchPlan plan;
  plan.opts = parse_launch_options(args, env);
  if (as_torchrun) plan.opts.use_env = true;  // torchrun 2.x: no --local_rank
  if (plan.opts.help) {
    out << usage_text();
    return std::nullopt;
  }
  if (plan.opts.version) {
    out << version_text() << std::endl;
    return std::nullopt;
  }
  const HostCounts host = probe_host_with_slurm(plan.opts.nproc_spec == "gpu" || plan.opts.nproc_spec == "auto", env);
  plan.nproc = resolve_nproc(plan.opts.nproc_spec, host);
  plan.command = resolve_command(plan.opts, env);
  resolve_slurm(plan, env);
  static_placement(plan.opts, plan.nproc);  // the job's ranks fit an int
  if (plan.opts.virtual_local_rank)  // every local rank needs its GPU before any worker starts
    virtual_visible_device(env, plan.opts.task ? plan.opts.task->local_rank : plan.nproc - 1,
                           plan.opts.task ? plan.opts.task->local_rank + 1 : plan.nproc);
  check_master_addr(plan.opts);
  check_rdzv_endpoint(plan.opts);
  if (!plan.opts.standalone && !plan.opts.rdzv.elastic() && plan.opts.node_rank == 0 && plan.opts.master_port != 0)
    reserve_check_port(plan.opts.master_port);
  if (!plan.opts.numa_binding.empty()) {
    // srun-per-rank mode: the one worker uses the GPU of srun's local id.
    std::vector<int> ranks;
    for (int lr = 0; lr < plan.nproc; ++lr) ranks.push_back(plan.opts.task ? plan.opts.task->local_rank : lr);
    for (const std::set<int>& cpus : numa_cpu_bindings(plan.opts.numa_binding, plan.opts.numa_binding_source, ranks,
                                                           probe_numa_inputs())) {
      plan.cpu_binding.emplace_back(cpus.begin(), cpus.end());
      notes << "ddp-launch: " << plan.opts.numa_binding_source << ": local rank " << plan.cpu_binding.size() - 1 << " on CPUs " << format_cpu_list(cpus) << std::endl;
    }
  }
  notes << duplicate_filters_warning(plan.opts.logs, plan.nproc);
  check_summary_path(plan.opts.summary_json, plan.opts.summary_json_source);
  check_summary_path(plan.opts.trace_file, plan.opts.trace_file_source, "trace.json");
  check_distinct_outputs(plan.opts);
  const std::string pythonpath = plan.opts.python_heartbeat ? python_heartbeat_path(env) : "";
  if (plan.opts.logs.needs_dir()) {
    auto tmp = env.find("TMPDIR");
    plan.run_log_dir = make_run_log_dir(plan.opts.logs.dir, plan.opts.logs.dir_source, plan.opts.run_id,
                                       tmp == env.end() ? "" : tmp->second);
  }
  if (auto omp = default_omp_threads(env, host.cpus, plan.nproc)) {
    plan.omp_threads = *omp;
    notes << "ddp-launch: OMP_NUM_THREADS is not set; each worker gets OMP_NUM_THREADS=" << *omp << " ("
          << host.cpus << (host.cpus == 1 ? " CPU / " : " CPUs / ") << plan.nproc
          << (plan.nproc == 1 ? " worker" : " workers") << "). Set it to override." << std::endl;
  }
  // After every check, so that a usage error stays the only line.
  for (const std::string& note : plan.opts.notes) notes << "ddp-launch: " << note << std::endl;
  plan.parent_env = env;
  if (plan.opts.python_heartbeat) plan.parent_env["PYTHONPATH"] = pythonpath;
  if (plan.opts.python_heartbeat)
    if (const std::string flag = python_site_skipped_by(plan.command); !flag.empty())
      notes << python_heartbeat_skipped_line(flag) << std::endl;
  return plan;
}

}  // namespace ddp::launcher
