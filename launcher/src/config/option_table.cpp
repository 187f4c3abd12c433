#include "option_table.h"

#include "ddp/launcher/base/signal_names.h"
#include "ddp/launcher/config/options.h"

#include <sstream>

namespace ddp::launcher {
namespace po = boost::program_options;

// Every option the launcher knows, underscore spelling. Values are kept as
// strings so that range errors can name the value the user typed.
po::options_description supported_options() {
  po::options_description d("Options (each also as --x-y, and as PET_X_Y in the environment)");
  d.add_options()
      ("help,h", "show this help and exit")
      ("version", "show the version and exit")
      ("nproc_per_node", po::value<std::string>()->value_name("N|cpu|gpu|auto"),
       "workers on this node (default 1, at most 65536); cpu = CPU count, gpu = NVIDIA GPU count, auto = gpu if any else cpu")
      ("nnodes", po::value<std::string>()->value_name("N|MIN:MAX"),
       "number of nodes (default 1); MIN:MAX with --rdzv_backend c10d or etcd-v3: the job runs while at least MIN take part")
      ("hot_spares", po::value<std::string>()->value_name("K"),
       "c10d, etcd-v3: up to K nodes beyond --nnodes (MAX) join and stand by, running no workers; when a node "
       "leaves, a spare takes its node rank in the next round, without waiting for a new node, and the world size "
       "stays the same (default 0: a node beyond MAX waits join_timeout, as with torchrun); with --recovery in_place, "
       "a lost node other than node rank 0 is replaced within the running round and the spare's ranks come back in "
       "place. Not torchrun's MIN:MAX "
       "read as spares (NVRx): MIN:MAX keeps torchrun's meaning, a job that runs smaller")
      ("node_rank", po::value<std::string>()->value_name("R"), "rank of this node, 0..nnodes-1 (default 0; static rendezvous)")
      ("rdzv_backend", po::value<std::string>()->value_name("static|c10d|etcd-v3"),
       "static (default): --node_rank and --master_addr/--master_port fix the ranks; c10d: nodes meet at "
       "--rdzv_endpoint, node ranks come from the rendezvous, nodes may leave and join; etcd-v3: as c10d, "
       "the rendezvous kept in an etcd v3 cluster (3.4 or later), so no node is a single point of failure")
      ("rdzv_endpoint", po::value<std::string>()->value_name("HOST[:PORT]"),
       "c10d: the node that hosts the rendezvous store (port default 29400; IPv6 as [ADDR]:PORT); "
       "etcd-v3: the etcd members' client URLs, HOST[:PORT],HOST[:PORT],... (port default 2379; a down member is "
       "skipped); "
       "static: the same as --master_addr/--master_port; port 0: a free port (a one-node job)")
      ("rdzv_conf", po::value<std::string>()->value_name("K=V,..."),
       "c10d and etcd-v3 settings: join_timeout (600), last_call_timeout (30), close_timeout (30), read_timeout (60), "
       "keep_alive_interval (5), keep_alive_max_attempt (3), is_host")
      ("local_addr", po::value<std::string>()->value_name("ADDR"),
       "c10d, etcd-v3: this node's address for the other nodes (default: the address that reaches --rdzv_endpoint)")
      ("master_addr", po::value<std::string>()->value_name("HOST"), "address of rank 0's node (default 127.0.0.1)")
      ("master_port", po::value<std::string>()->value_name("PORT"), "port of the workers' store (default 29500; 0: a free port, a one-node job); one node: the launcher hosts it")
      ("standalone", "single node on a free port (like torchrun --standalone)")
      ("slurm_tasks", "Slurm: every srun task is one rank (RANK=SLURM_PROCID) and runs one worker")
      ("use_env", "do not pass --local_rank=N to workers (they read LOCAL_RANK)")
      ("local_rank_style", po::value<std::string>()->value_name("underscore|dash"),
       "how workers get their local rank without --use_env: underscore = --local_rank=N (torch.distributed.launch "
       "1.x, the default), dash = --local-rank=N (2.x)")
      ("no_python", "run the program directly, never through python")
      ("module,m", "run the program as a Python module (python -m)")
      ("role", po::value<std::string>()->value_name("NAME"), "worker role name (default 'default')")
      ("rdzv_id", po::value<std::string>()->value_name("ID"), "run id shown to workers as TORCHELASTIC_RUN_ID (default 'none')")
      ("max_restarts", po::value<std::string>()->value_name("K"), "restart the whole group up to K times after a failure (default 0)")
      ("recovery", po::value<std::string>()->value_name("in_place|restart"),
       "after a rank is lost: in_place (default) brings back only that rank and the others keep their state, when "
       "every live rank advertises it on its heartbeat page (ddp-launch's C++ runtime loop); else, and with "
       "restart, the whole group is restarted. Recoveries and restarts share --max_restarts, for the whole job "
       "(with c10d, every node's)")
      ("recovery_standby", po::value<std::string>()->value_name("on|off"),
       "with --recovery in_place, once a rank advertises it: on (default) keeps one idle process per node with the "
       "program's libraries loaded (LibTorch: ~half a second of a rank's start), in which a returning rank starts; "
       "off starts it afresh")
      ("shutdown_timeout", po::value<std::string>()->value_name("SECONDS"),
       "grace period between SIGTERM and SIGKILL when tearing down (default 30)")
      ("stall_timeout", po::value<std::string>()->value_name("SECONDS"),
       "end the attempt as stalled (exit code 124; --max_restarts applies) when a rank makes no progress for this "
       "long: its heartbeat (C++ runtime workers), else CPU time or output (default: off)")
      ("log_dir", po::value<std::string>()->value_name("DIR"),
       "per run, attempt and local rank: DIR/<rdzv_id>_XXXXXX/attempt_N/<local_rank>/{stdout.log,stderr.log,error.json}")
      ("redirects,r", po::value<std::string>()->value_name("S"),
       "streams to write to the log files only: 0 none, 1 stdout, 2 stderr, 3 both, or per local rank 0:1,1:2 (default 0)")
      ("tee,t", po::value<std::string>()->value_name("S"),
       "streams to write to the log files and the console, each line prefixed [default0]: (values as --redirects)")
      ("local_ranks_filter", po::value<std::string>()->value_name("R,R"),
       "show only these local ranks' output on the console (the log files keep every rank's)")
      ("log_line_prefix_template", po::value<std::string>()->value_name("T"),
       "prefix of tee'd lines from ${role_name}, ${rank}, ${local_rank} (default [${role_name}${local_rank}]:; "
       "also TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)")
      ("duplicate_stdout_filters", po::value<std::string>()->value_name("F,F"),
       "also copy tee'd stdout lines that contain any of these strings to <log dir>/attempt_N/filtered_stdout.log "
       "(all ranks, prefixed; ',,' is a comma inside a filter)")
      ("duplicate_stderr_filters", po::value<std::string>()->value_name("F,F"),
       "the same for tee'd stderr lines, into filtered_stderr.log")
      ("signals_to_handle", po::value<std::string>()->value_name("SIG,SIG"),
       "signals forwarded to every worker before the grace period and SIGKILL (default SIGTERM,SIGINT,SIGHUP,SIGQUIT; "
       "add SIGUSR1,SIGUSR2 for Slurm's warnings); workers see the list in TORCHELASTIC_SIGNALS_TO_HANDLE")
      ("virtual_local_rank", "every worker gets LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming only its own GPU")
      ("numa_binding", po::value<std::string>()->value_name("node|socket|exclusive|core-complex"),
       "bind each worker to CPUs near its GPU (the GPU's NUMA node, its socket, an exclusive share of the node's "
       "cores, or one L3 core complex)")
      ("event_log_handler", po::value<std::string>()->value_name("null|console"),
       "null (default): no events; console: torchrun's events (worker START, SUCCEEDED, FAILED, ...) as JSON lines on stderr")
      ("logs_specs", po::value<std::string>()->value_name("default"),
       "torchrun's log plugin name; only default, whose behaviour is the log options above")
      ("summary_json", po::value<std::string>()->value_name("PATH"),
       "write the run summary (every rank's exit, wall and CPU time, peak RSS) as JSON to PATH")
      ("straggler_threshold", po::value<std::string>()->value_name("SCORE"),
       "name a rank while the job runs when its own work a step is this much slower than the fastest rank's: its "
       "score (fastest / its own, from the heartbeat pages of C++ runtime workers) below SCORE, 0 < SCORE <= 1 "
       "(default 0.8; 0: never, and without --trace_file the steps are not sampled at all: no step columns in the "
       "summary)")
      ("straggler_window", po::value<std::string>()->value_name("SECONDS"),
       "the seconds of steps each straggler verdict compares (default 30)")
      ("trace_file", po::value<std::string>()->value_name("PATH"),
       "write a timeline of every rank (steps, collectives, the launcher's events) to PATH at the run's end, in the "
       "Chrome / Perfetto trace-event JSON format (ui.perfetto.dev)")
      ("python_heartbeat",
       "Python workers write the heartbeat page too (ddp_launch.heartbeat, enabled through a sitecustomize on "
       "PYTHONPATH once torch is imported): stall detection, straggler scores and the trace for Python ranks")
      ("run_path", "run PROGRAM through python whatever its name (torchrun runs it with runpy.run_path)")
      ("start_method", po::value<std::string>()->value_name("spawn|fork|forkserver"),
       "accepted for torchrun scripts: workers are always new processes (torchrun too for a script)")
      ("monitor_interval", po::value<std::string>()->value_name("SECONDS"),
       "accepted for torchrun scripts: ddp-launch sees a worker's exit at once instead of polling");
  return d;
}

po::options_description make_description() {
  po::options_description d;
  d.add(supported_options());
  return d;
}

std::string usage_text() {
  std::ostringstream s;
  s << "Usage: ddp-launch [options] PROGRAM [ARGS...]\n"
       "Starts --nproc_per_node workers with the torchrun environment (RANK, LOCAL_RANK,\n"
       "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), supervises them, tears the group down\n"
       "when one fails and exits with the failing worker's exit code.\n"
       "PROGRAM: a .py script (run as python3 -u), a module with -m, or an executable.\n"
       "Unless --use_env is given, each worker also gets --local_rank=N (torch.distributed.launch);\n"
       "called as 'torchrun' (the link beside ddp-launch), --use_env is implied, as in torchrun 2.x.\n"
       "Every run ends with a summary table per rank (exit, wall and CPU time, peak RSS).\n\n"
    << supported_options() << "\n"
    << "Environment:\n"
       "  PYTHON_EXEC         interpreter for .py scripts and -m (default: python3 on PATH)\n"
       "  PET_<OPTION>        any option above, e.g. PET_NPROC_PER_NODE=4 (the command line wins)\n"
       "  SLURM_*             inside a Slurm allocation, the defaults of --nnodes, --node_rank, --master_addr\n"
       "                      and --master_port (MASTER_PORT if set), see docs/slurm.md\n"
       "  OMP_NUM_THREADS     passed through; when unset, workers get CPUs / workers (at least 1)\n"
       "  TMPDIR              where the launcher's private run directory (error files) is made, and\n"
       "                      the log directory for --redirects/--tee without --log_dir\n"
       "  TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE  as --log_line_prefix_template (torchrun 2.x)\n"
       "Terminal: stdin goes to local rank 0 only (a debugger works there); the others read /dev/null.\n";
  return s.str();
}

}  // namespace ddp::launcher
