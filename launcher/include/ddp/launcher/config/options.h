#pragma once
// The launcher's options: one struct with torchrun's defaults, filled once
// from the command line and PET_* variables by parse_launch_options(). Nothing
// else in the launcher reads argv. Both spellings of every multi-word option
// are accepted (--nproc_per_node and --nproc-per-node); the command line wins
// over PET_<NAME>; messages name an option as the user spelled it. Every
// torchrun option is accepted; the few that change nothing here
// (--start_method, --monitor_interval) are still checked as torchrun checks
// them. Everything from the program on is passed to the workers untouched.

#include "ddp/launcher/config/log_spec.h"
#include "ddp/launcher/base/signal_names.h"

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::launcher {

// The most workers one launcher starts (--nproc_per_node).
constexpr int kMaxWorkers = 1 << 16;

// The shortest --stall_timeout. CPU time grows in clock ticks (10 ms at
// USER_HZ 100): 2% of the time needs 0.5 s to be one tick, so a working rank
// at a few % CPU can show no growth for a shorter while; 1 s is two ticks of
// margin and four looks (interval() is timeout / 4 there). No collective or
// step a job relies on is bounded more tightly than that.
constexpr double kMinStallTimeoutS = 1.0;

// Bad command line or PET_* value: one line naming the value; exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs f, turning the std::invalid_argument of ddp::parse_* (whose message
// names the value) into a UsageError.
template <typename F>
auto usage_checked(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// srun-per-rank mode (slurm.h): the identity Slurm gave this launcher's one
// worker beyond RANK/WORLD_SIZE (which come from node_rank/nnodes there).
struct TaskRank {
  int local_rank = 0;        // SLURM_LOCALID
  int local_world_size = 1;  // this node's entry of SLURM_TASKS_PER_NODE
  int group_rank = 0;        // SLURM_NODEID
  int group_world_size = 1;  // SLURM_NNODES
};

// --rdzv_backend c10d and its settings (rdzv_options.cpp). With the static
// backend only `host`/`port` may be set (--rdzv_endpoint, torchrun's other
// spelling of --master_addr/--master_port).
struct RdzvOptions {
  std::string backend = "static";  // static | c10d | etcd-v3
  std::string host;                // --rdzv_endpoint's host, "" when not given
  int port = 29400;                // its port (torchrun's default)
  bool port_given = false;
  std::string endpoints;           // etcd-v3: every member, "host:port,host:port" (host, port: the first)
  int min_nodes = 1;               // --nnodes MIN:MAX (N is N:N)
  int max_nodes = 1;
  int hot_spares = 0;              // --hot_spares: nodes beyond max_nodes that stand by
  std::string local_addr;          // --local_addr, "" = the address that reaches the endpoint
  // --rdzv_conf, torchrun's keys and defaults.
  double join_timeout_s = 600;
  double last_call_timeout_s = 30;
  double close_timeout_s = 30;
  double read_timeout_s = 60;      // `read_timeout` (or `timeout`): one store operation
  double keep_alive_interval_s = 5;
  int keep_alive_max_attempt = 3;
  std::string is_host = "auto";    // auto | 1 | 0: whether this node hosts the store
  bool elastic() const { return backend == "c10d" || backend == "etcd-v3"; }
};

// "host", "host:port", "[v6]:port", "[v6]" or a bare IPv6 address. Throws UsageError.
void parse_rdzv_endpoint(const std::string& text, const std::string& given_as, RdzvOptions& r);
// etcd-v3: "host[:port],host[:port],..." (port default 2379) into r.endpoints,
// r.host and r.port (the first member). Throws UsageError.
void parse_etcd_endpoints(const std::string& text, const std::string& given_as, RdzvOptions& r);
// "k=v,k=v" into r. Throws UsageError naming an unknown key or a bad value.
void parse_rdzv_conf(const std::string& text, const std::string& given_as, RdzvOptions& r);

// --event_log_handler: torchrun's registered handlers a native launcher
// can be: null (dynamic_rendezvous too) prints no event, console one JSON line
// per event on stderr.
enum class EventLogHandler { Null, Console };

struct LaunchOptions {
  std::string nproc_spec = "1";   // as given (checked): integer, cpu, gpu or auto; see resolve_nproc()
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::string master_addr_source; // how it was given ("--master_addr h", "--rdzv_endpoint h:p"), "" default/Slurm
  int master_port = 29500;        // 0: pick a free port per attempt (one node only: check_free_port)
  std::string free_port_source;   // how port 0 was given ("--rdzv-endpoint localhost:0", "--master_port 0"); "" none
  bool standalone = false;
  bool use_env = false;           // false: workers get --local_rank=N (torch.distributed.launch)
  bool local_rank_dash = false;   // --local_rank_style dash: --local-rank=N (torch.distributed.launch 2.x)
  bool no_python = false;
  bool module = false;
  bool run_path = false;          // --run_path: PROGRAM runs through python whatever its name
  std::string role = "default";
  std::string run_id = "none";
  int max_restarts = 0;
  // --recovery: true (in_place) brings back only a lost rank when every live
  // rank advertises in-place recovery (features/recovery.cpp); false
  // (restart) restarts the whole group, as torchrun does.
  bool recovery_in_place = true;
  // --recovery_standby: with in_place, a pre-started process per node (its
  // libraries loaded) that a returning rank starts in (process/standby.h).
  bool recovery_standby = true;
  RdzvOptions rdzv;                // --rdzv_backend, --rdzv_endpoint, --rdzv_conf, --nnodes MIN:MAX, --local_addr
  double shutdown_timeout_s = 30.0;
  double stall_timeout_s = 0;      // --stall_timeout: a rank without progress this long ends the attempt; 0 off (progress_watch.h)
  LogOptions logs;                 // --log_dir, --redirects, --tee, --local_ranks_filter, prefix
  std::vector<int> signals_to_handle = default_handled_signals();  // --signals_to_handle (signals.h)
  bool virtual_local_rank = false; // --virtual_local_rank: LOCAL_RANK=0, one GPU per worker (worker_env.h)
  EventLogHandler event_log_handler = EventLogHandler::Null;  // --event_log_handler (event_log.h)
  std::string numa_binding;        // --numa_binding: "" none, node, socket, exclusive, core-complex (numa_binding.h)
  std::string numa_binding_source; // how it was given, for messages
  std::string summary_json;        // --summary_json PATH, "" none
  // --straggler_threshold: a rank whose relative score (straggler_scores.h)
  // falls below this is named while the job runs; 0 never (and, without
  // --trace_file, no sampling: no step columns in the summary). On by default:
  // the sampling costs the ranks nothing and the line is printed only for a
  // rank clearly slower than the others, at most every 5 minutes.
  double straggler_threshold = 0.8;
  double straggler_window_s = 30;  // --straggler_window: the seconds of steps each verdict looks at
  std::string trace_file;          // --trace_file PATH: the timeline of every rank (trace_file.h), "" none
  std::string trace_file_source;   // how it was given, for messages
  // --python_heartbeat: Python workers write their heartbeat page too
  // (python/ddp_launch/heartbeat.py through a sitecustomize on PYTHONPATH).
  bool python_heartbeat = false;
  std::string summary_json_source; // how it was given, for messages
  // TORCHELASTIC_ENABLE_FILE_TIMER=1 (torchrun has no option for it): serve
  // torchrun's file timer (file_timer_server.h) on TORCHELASTIC_TIMER_FILE,
  // or on a pipe in the run directory when that is unset ("").
  bool file_timer = false;
  std::string file_timer_path;
  bool help = false;
  bool version = false;
  bool slurm_tasks = false;        // --slurm_tasks: every srun task is one rank (slurm.h)
  std::optional<TaskRank> task;    // set by resolve_slurm in srun-per-rank mode
  std::vector<std::string> notes;  // one line each for stderr: options given but ignored, as torchrun ignores them
  std::set<std::string> given;     // options set on the command line or as PET_* (underscore names)

  std::string program;             // script, module or executable
  std::vector<std::string> program_args;
};

// Environment as a name -> value map (tests pass their own).
using EnvMap = std::map<std::string, std::string>;
EnvMap current_environment();

// Parses launcher arguments (argv without argv[0]). Throws UsageError.
// Does not resolve --nproc_per_node cpu/gpu/auto (see resolve_nproc) and does
// not look at the file system.
LaunchOptions parse_launch_options(const std::vector<std::string>& args, const EnvMap& env);

// Port 0 in --rdzv_endpoint or --master_port (torchrun's "--rdzv-endpoint=localhost:0" for several
// one-node jobs on one host): this node picks a free port, which no other node
// could know. Throws UsageError when the job has more than one node, or when
// c10d's is_host=0 says another node hosts the store. parse_launch_options
// calls it, and resolve_slurm again once Slurm has said how many nodes there are.
void check_free_port(const LaunchOptions& o);

// Counts that resolve_nproc needs; injected so tests need no GPU.
struct HostCounts {
  int cpus = 1;
  int gpus = 0;
};
// CPUs in our affinity mask; NVIDIA GPUs via libcuda (no LibTorch) only when
// with_gpus, since cuInit can take a noticeable time on a GPU machine.
HostCounts probe_host(bool with_gpus);

// Turns nproc_spec into the number of workers on this node. Throws UsageError (e.g. gpu without GPUs).
int resolve_nproc(const std::string& spec, const HostCounts& host);

std::string usage_text();
std::string version_text();

}  // namespace ddp::launcher
