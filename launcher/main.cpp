// ddp-launch: parse, resolve, supervise. All logic lives in ddp_launcher.
#include "ddp/common/host_resolve.h"
#include "ddp/common/output_file.h"
#include "ddp/launcher/config/command.h"
#include "ddp/launcher/config/invocation.h"
#include "ddp/launcher/output/log_dir.h"
#include "ddp/launcher/config/numa_binding.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/config/slurm.h"
#include "ddp/launcher/process/limits.h"
#include "ddp/launcher/supervise/supervisor.h"
#include "ddp/launcher/config/worker_env.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::launcher;

namespace {

int usage_error(const std::string& msg) {
  std::cerr << "ddp-launch: error: " << msg << " (see ddp-launch --help)" << std::endl;
  return 2;
}

// A --summary_json the run could not write is found now, not after hours.
void check_summary_path(const std::string& path, const std::string& given_as) {
  if (path.empty()) return;
  // A device, a FIFO or a symlink (/dev/null, /dev/stdout) is written
  // through, not replaced (ddp/common/output_file.h): it is the path itself
  // that must be writable, not its directory.
  if (ddp::output_way(path) == ddp::OutputWay::WriteThrough) {
    if (::access(path.c_str(), W_OK) != 0)
      throw UsageError(given_as + ": cannot write to '" + path + "': " + std::strerror(errno) +
                       "; give a path you can write");
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      throw UsageError(given_as + ": '" + path + "' is a directory; give a file path, e.g. " +
                       (path.back() == '/' ? path : path + "/") + "summary.json");
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
                     (path.back() == '/' ? path : path + "/") + "summary.json");
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

}  // namespace

int main(int argc, char** argv) {
  // A console that went away (`ddp-launch ... | head`) is EPIPE on a write,
  // never the launcher's death: the job's exit code, the report's files and
  // --summary_json must not depend on who reads the output. Workers get the
  // default back before exec (spawn.h), as torchrun's do.
  ::signal(SIGPIPE, SIG_IGN);
  const EnvMap env = current_environment();
  LaunchPlan cfg;
  try {
    cfg.opts = parse_launch_options(std::vector<std::string>(argv + 1, argv + argc), env);
    if (argc > 0 && invoked_as_torchrun(argv[0])) cfg.opts.use_env = true;  // torchrun 2.x: no --local_rank
    if (cfg.opts.help) {
      std::cout << usage_text();
      return 0;
    }
    if (cfg.opts.version) {
      std::cout << version_text() << std::endl;
      return 0;
    }
    const HostCounts host = probe_host_with_slurm(cfg.opts.nproc_spec == "gpu" || cfg.opts.nproc_spec == "auto", env);
    cfg.nproc = resolve_nproc(cfg.opts.nproc_spec, host);
    cfg.command = resolve_command(cfg.opts, env);
    resolve_slurm(cfg, env);
    static_placement(cfg.opts, cfg.nproc);  // the job's ranks fit an int
    if (cfg.opts.virtual_local_rank)  // every local rank needs its GPU before any worker starts
      virtual_visible_device(env, cfg.opts.task ? cfg.opts.task->local_rank : cfg.nproc - 1,
                             cfg.opts.task ? cfg.opts.task->local_rank + 1 : cfg.nproc);
    check_master_addr(cfg.opts);
    if (!cfg.opts.standalone && !cfg.opts.rdzv.elastic() && cfg.opts.node_rank == 0 && cfg.opts.master_port != 0)
      reserve_check_port(cfg.opts.master_port);
    if (!cfg.opts.numa_binding.empty()) {
      // srun-per-rank mode: the one worker uses the GPU of srun's local id.
      std::vector<int> ranks;
      for (int lr = 0; lr < cfg.nproc; ++lr) ranks.push_back(cfg.opts.task ? cfg.opts.task->local_rank : lr);
      for (const std::set<int>& cpus : numa_cpu_bindings(cfg.opts.numa_binding, cfg.opts.numa_binding_source, ranks,
                                                             probe_numa_inputs())) {
        cfg.cpu_binding.emplace_back(cpus.begin(), cpus.end());
        std::cerr << "ddp-launch: " << cfg.opts.numa_binding_source << ": local rank "
                  << cfg.cpu_binding.size() - 1 << " on CPUs " << format_cpu_list(cpus) << std::endl;
      }
    }
    std::cerr << duplicate_filters_warning(cfg.opts.logs, cfg.nproc);
    check_summary_path(cfg.opts.summary_json, cfg.opts.summary_json_source);
    if (cfg.opts.logs.needs_dir()) {
      auto tmp = env.find("TMPDIR");
      cfg.run_log_dir = make_run_log_dir(cfg.opts.logs.dir, cfg.opts.logs.dir_source, cfg.opts.run_id,
                                         tmp == env.end() ? "" : tmp->second);
    }
    if (auto omp = default_omp_threads(env, host.cpus, cfg.nproc)) {
      cfg.omp_threads = *omp;
      std::cerr << "ddp-launch: OMP_NUM_THREADS is not set; each worker gets OMP_NUM_THREADS=" << *omp << " ("
                << host.cpus << " CPUs / " << cfg.nproc << " workers). Set it to override." << std::endl;
    }
    // After every check, so that a usage error stays the only line.
    for (const std::string& note : cfg.opts.notes) std::cerr << "ddp-launch: " << note << std::endl;
  } catch (const UsageError& e) {
    return usage_error(e.what());
  }
  cfg.parent_env = env;
  try {
    Supervisor sup(std::move(cfg), std::cerr);
    return sup.run();
  } catch (const std::exception& e) {
    std::cerr << "ddp-launch: error: " << e.what() << std::endl;
    return 1;
  }
}
