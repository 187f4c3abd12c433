#include "ddp/launcher/config/options.h"

#include "ddp/common/parse.h"

#include "option_reader.h"
#include "option_table.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <stdexcept>
#include <sys/random.h>
#include <sched.h>
#include <sstream>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace ddp::launcher {
namespace po = boost::program_options;

namespace {

bool is_flag(const po::option_description& o) { return o.semantic()->max_tokens() == 0; }

// --x-y[=v] -> --x_y[=v]; single-dash short options are left alone.
std::string normalise(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return arg;
  auto eq = arg.find('=');
  std::string name = arg.substr(0, eq);
  std::replace(name.begin() + 2, name.end(), '-', '_');
  return eq == std::string::npos ? name : name + arg.substr(eq);
}

// torchrun options that change nothing here, checked like theirs.
void read_torchrun_only(OptionReader& r, LaunchOptions& o) {
  if (auto v = r.value("start_method"); v && v->first != "spawn" && v->first != "fork" && v->first != "forkserver")
    throw UsageError(r.given_as("start_method", *v) + ": not a start method; use spawn, fork or forkserver");
  if (auto v = r.value("monitor_interval"))
    usage_checked([&] { return parse_seconds(v->first, v->second); });
  o.run_path = r.flag("run_path");

}

// Where this node's workers sit: their count, the nodes, the rendezvous
// and the master address and port (static, c10d or --standalone).
void read_placement(OptionReader& r, LaunchOptions& o) {
  if (auto v = r.value("nproc_per_node")) {
    o.nproc_spec = v->first;
    if (o.nproc_spec != "cpu" && o.nproc_spec != "gpu" && o.nproc_spec != "auto") {
      try {
        parse_int(v->first, v->second, 1, kMaxWorkers);
      } catch (const std::invalid_argument&) {
        throw UsageError(v->second + ": '" + v->first + "' is not a worker count; give an integer from 1 to " +
                         std::to_string(kMaxWorkers) + ", cpu, gpu or auto");
      }
    }
  }
  if (auto v = r.value("rdzv_backend")) {
    if (v->first == "c10d" || v->first == "static" || v->first == "etcd-v3") {
      o.rdzv.backend = v->first;
    } else if (v->first == "etcd" || v->first == "etcd-v2") {
      // torchrun's etcd backends speak etcd's v2 API (removed in etcd 3.6)
      // and store a Python pickle: no ddp-launch node could meet them.
      throw UsageError(r.given_as("rdzv_backend", *v) +
                       ": torchrun's etcd rendezvous speaks etcd's removed v2 API and is not supported; use "
                       "--rdzv_backend etcd-v3 (etcd's v3 API, the same etcd servers) or c10d, which needs no etcd "
                       "server (the node at --rdzv_endpoint hosts the store)");
    } else {
      throw UsageError(r.given_as("rdzv_backend", *v) + ": unknown rendezvous backend; use static, c10d or etcd-v3");
    }
  }
  if (auto v = r.value("nnodes")) {
    std::string text = v->first;
    if (auto colon = text.find(':'); colon != std::string::npos) {
      const std::string lo = text.substr(0, colon), hi = text.substr(colon + 1);
      o.rdzv.min_nodes = static_cast<int>(usage_checked([&] { return parse_int(lo, v->second + " MIN", 1, 1 << 20); }));
      o.rdzv.max_nodes = static_cast<int>(usage_checked([&] { return parse_int(hi, v->second + " MAX", 1, 1 << 20); }));
      if (o.rdzv.min_nodes > o.rdzv.max_nodes)
        throw UsageError(r.given_as("nnodes", *v) + ": MIN is above MAX; write MIN:MAX, e.g. " + hi + ":" + lo);
      if (o.rdzv.min_nodes != o.rdzv.max_nodes && !o.rdzv.elastic())
        throw UsageError(r.given_as("nnodes", *v) + ": a node range needs --rdzv_backend c10d (static rendezvous "
                         "has a fixed node count; give --nnodes " + hi + " or add --rdzv_backend c10d "
                         "--rdzv_endpoint HOST:PORT)");
      text = hi;
    }
    o.nnodes = static_cast<int>(usage_checked([&] { return parse_int(text, v->second, 1, 1 << 20); }));
    if (text == v->first) o.rdzv.min_nodes = o.rdzv.max_nodes = o.nnodes;
  }
  if (auto v = r.value("hot_spares")) {
    // Nodes in all, spares included, as many as --nnodes allows: more than
    // any allocation (and a negative count is a typo).
    const long long most = (1 << 20) - o.rdzv.max_nodes;
    try {
      o.rdzv.hot_spares = static_cast<int>(parse_int(v->first, v->second, 0, most));
    } catch (const std::invalid_argument&) {
      throw UsageError(r.given_as("hot_spares", *v) + ": not a spare node count; give 0 to " + std::to_string(most) +
                       " (nodes beyond --nnodes " + std::to_string(o.rdzv.max_nodes) +
                       " that stand by; 1048576 nodes in all at most)");
    }
    if (o.rdzv.hot_spares > 0 && !o.rdzv.elastic())
      throw UsageError(r.given_as("hot_spares", *v) + ": hot spares need --rdzv_backend c10d or etcd-v3 (a static "
                       "rendezvous fixes every node's rank); add --rdzv_backend c10d --rdzv_endpoint HOST:PORT");
  }
  if (auto v = r.value("rdzv_endpoint"); v && !v->first.empty()) {
    if (o.rdzv.backend == "etcd-v3") parse_etcd_endpoints(v->first, v->second, o.rdzv);
    else parse_rdzv_endpoint(v->first, v->second, o.rdzv);
  }
  if (auto v = r.value("rdzv_conf"); v && !v->first.empty()) parse_rdzv_conf(v->first, v->second, o.rdzv);
  if (auto v = r.value("local_addr"); v && !v->first.empty()) o.rdzv.local_addr = v->first;
  o.standalone = r.flag("standalone");
  if (o.rdzv.backend == "etcd-v3" && o.rdzv.host.empty() && !o.standalone)
    throw UsageError("--rdzv_backend etcd-v3 needs --rdzv_endpoint HOST[:PORT],HOST[:PORT],..., the client URLs of "
                     "the etcd cluster's members (port default 2379; the same on every node)");
  if (o.rdzv.elastic() && o.rdzv.host.empty() && !o.standalone)
    throw UsageError("--rdzv_backend c10d needs --rdzv_endpoint HOST[:PORT], the node that hosts the rendezvous "
                     "store (any one node of the job, the same on every node)");
  if (auto v = r.value("node_rank"))
    o.node_rank = static_cast<int>(usage_checked([&] { return parse_int(v->first, v->second, 0, 1 << 20); }));
  // c10d: node ranks come from the rendezvous; torchrun ignores --node_rank
  // there too, so scripts that pass it anyway keep working.
  if (o.rdzv.elastic()) o.node_rank = 0;
  if (o.node_rank >= o.nnodes)
    throw UsageError(r.source("node_rank") + " " + std::to_string(o.node_rank) + " must be below " + r.source("nnodes") +
                     " " + std::to_string(o.nnodes) + " (node ranks are 0.." + std::to_string(o.nnodes - 1) + ")");
  if (auto v = r.value("master_addr")) {
    if (v->first.empty()) throw UsageError(v->second + ": empty address, give a host name or IP of rank 0's node");
    o.master_addr = v->first;
    o.master_addr_source = r.given_as("master_addr", *v);
  }
  if (auto v = r.value("master_port")) {
    o.master_port = static_cast<int>(usage_checked([&] { return parse_int(v->first, v->second, 0, 65535); }));
    if (o.master_port == 0) o.free_port_source = r.given_as("master_port", *v);
  }
  // Static rendezvous at --rdzv_endpoint: torchrun's other spelling of
  // --master_addr/--master_port (it wins over them there too).
  if (!o.rdzv.elastic() && !o.rdzv.host.empty() && !o.standalone) {
    if (!o.rdzv.port_given)
      throw UsageError(r.source("rdzv_endpoint") + " " + o.rdzv.host +
                       ": static rendezvous needs the port too; write HOST:PORT (rank 0's node and its free port)");
    o.master_addr = o.rdzv.host;
    o.master_port = o.rdzv.port;
    o.free_port_source.clear();
    if (auto v = r.value("rdzv_endpoint")) {
      o.master_addr_source = r.given_as("rdzv_endpoint", *v);
      if (o.master_port == 0) o.free_port_source = o.master_addr_source;
    }
  }
  if (o.rdzv.elastic() && o.rdzv.port_given && o.rdzv.port == 0)
    if (auto v = r.value("rdzv_endpoint")) o.free_port_source = r.given_as("rdzv_endpoint", *v);
  if (o.standalone) {
    // torchrun ignores these silently; one line says so here.
    std::string ignored;
    r.value("rdzv_id");  // read here so that it counts as given; the run id is set with the program's style
    for (const char* name :
         {"master_addr", "master_port", "rdzv_backend", "rdzv_endpoint", "rdzv_conf", "rdzv_id", "local_addr"})
      if (o.given.count(name))
        ignored += (ignored.empty() ? "" : ", ") + r.typed(name);
    if (!ignored.empty())
      o.notes.push_back(r.source("standalone") + " picks its own rendezvous on this machine; ignoring " + ignored);
    // torchrun: "--rdzv-backend, --rdzv-endpoint, --rdzv-id are auto-assigned
    // and any explicitly set values are ignored". One node has nobody to
    // meet: a free port the launcher's workers' store keeps, no rendezvous
    // helper.
    o.rdzv = RdzvOptions{};
    o.free_port_source.clear();
    if (o.nnodes != 1)
      throw UsageError(r.source("standalone") + " runs one node, but " + r.source("nnodes") + " is " + std::to_string(o.nnodes));
    o.master_addr = "127.0.0.1";
    o.master_port = 0;  // picked when the group starts
  }
}

// A version 4 UUID as Python's str(uuid.uuid4()): 122 random bits from
// getrandom(2) (not std::random_device, whose libstdc++ form may block or
// use arc4random), version and variant bits set.
std::string random_uuid4() {
  unsigned char b[16] = {};
  if (::getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b))
    throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
  static const char* kHex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) id += '-';
    id += kHex[b[i] >> 4];
    id += kHex[b[i] & 0xf];
  }
  return id;
}

// How the program is run and told its rank: --use_env, the local rank
// style, python or not, Slurm's tasks, the role and run id.
void read_program_style(OptionReader& r, LaunchOptions& o) {
  o.use_env = r.flag("use_env");
  if (auto v = r.value("local_rank_style")) {
    if (v->first != "underscore" && v->first != "dash")
      throw UsageError(v->second + "=" + v->first +
                       ": not a local rank style; use underscore (--local_rank=N, torch.distributed.launch 1.x) "
                       "or dash (--local-rank=N, 2.x)");
    o.local_rank_dash = v->first == "dash";
  }
  o.no_python = r.flag("no_python");
  o.module = r.flag("module");
  // torchrun: --run_path wins over both (the program runs through python).
  if (o.run_path && (o.no_python || o.module)) {
    const bool both = o.no_python && o.module;
    o.notes.push_back((o.no_python ? r.source("no_python") : "") + (both ? " and " : "") +
                      (o.module ? r.source("module") : "") + (both ? " are" : " is") + " ignored: " +
                      r.source("run_path") + " runs the program through python (as torchrun does)");
    o.no_python = o.module = false;
  }
  if (o.no_python && o.module)
    throw UsageError(r.source("no_python") + " and " + r.source("module") +
                     " exclude each other: a module runs through python");
  o.slurm_tasks = r.flag("slurm_tasks");
  if (auto v = r.value("role")) {
    if (v->first.empty()) throw UsageError(v->second + ": empty role name");
    o.role = v->first;
  }
  // torchrun --standalone: a fresh uuid4 each run, any --rdzv_id ignored
  // (tools that key on TORCHELASTIC_RUN_ID tell runs apart).
  if (o.standalone)
    o.run_id = random_uuid4();
  else if (auto v = r.value("rdzv_id"))
    o.run_id = v->first;
}

// Restarts and the times that end an attempt.
void read_restarts_and_timeouts(OptionReader& r, LaunchOptions& o) {
  if (auto v = r.value("max_restarts"))
    o.max_restarts = static_cast<int>(usage_checked([&] { return parse_int(v->first, v->second, 0, 1000000); }));
  if (auto v = r.value("recovery")) {
    if (v->first != "in_place" && v->first != "restart")
      throw UsageError(r.given_as("recovery", *v) +
                       ": not a recovery mode; use in_place (bring back only the lost rank) or restart (restart "
                       "the whole group, as torchrun does)");
    o.recovery_in_place = v->first == "in_place";
  }
  if (auto v = r.value("recovery_standby")) {
    if (v->first != "on" && v->first != "off")
      throw UsageError(r.given_as("recovery_standby", *v) +
                       ": use on (a returning rank starts in a pre-started process) or off (it starts afresh)");
    o.recovery_standby = v->first == "on";
  }
  if (auto v = r.value("shutdown_timeout"))
    o.shutdown_timeout_s = usage_checked([&] { return parse_seconds(v->first, v->second); });
  if (auto v = r.value("stall_timeout")) {
    const auto s = parse_finite_double(v->first);
    static_assert(kMinStallTimeoutS == 1.0, "the message below says 1 s");
    if (!s || *s < kMinStallTimeoutS)
      throw UsageError(r.given_as("stall_timeout", *v) + ": " +
                       (s ? "must be at least 1 s (CPU time grows in 10 ms ticks and the launcher looks every "
                            "timeout / 4: below 1 s a working rank can look idle)"
                          : std::string("not a number of seconds")) +
                       "; give how long a rank may make no progress before the job ends as stalled (e.g. 300), "
                       "or leave it out to never check");
    o.stall_timeout_s = *s;
  }

}

// Where the workers' output goes (torchrun's log spec), and torchrun's file timer.
void read_logs(OptionReader& r, LaunchOptions& o) {
  if (auto v = r.value("log_dir")) {  // "" (torchrun's default): none
    o.logs.dir = v->first;
    o.logs.dir_source = r.given_as("log_dir", *v);
  }
  if (auto v = r.value("redirects")) o.logs.redirects = usage_checked([&] { return parse_std_spec(v->first, v->second); });
  if (auto v = r.value("tee")) o.logs.tee = usage_checked([&] { return parse_std_spec(v->first, v->second); });
  if (auto v = r.value("local_ranks_filter"); v && !v->first.empty())
    o.logs.ranks_filter = usage_checked([&] { return parse_rank_filter(v->first, v->second); });
  // torchrun 2.x reads the template from this variable only.
  auto prefix = r.value("log_line_prefix_template");
  if (!prefix)
    if (auto it = r.env().find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != r.env().end())
      prefix = std::make_pair(it->second, std::string("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"));
  if (prefix && !prefix->first.empty()) {
    usage_checked([&] { check_prefix_template(prefix->first, prefix->second); return 0; });
    o.logs.prefix_template = prefix->first;
  }
  // torchrun's file timer: only the exact value 1 turns it on, as in torchrun.
  if (auto it = r.env().find("TORCHELASTIC_ENABLE_FILE_TIMER"); it != r.env().end()) {
    if (it->second == "1") {
      o.file_timer = true;
      if (auto p = r.env().find("TORCHELASTIC_TIMER_FILE"); p != r.env().end()) {
        if (p->second.empty())
          throw UsageError("TORCHELASTIC_TIMER_FILE is empty; give the path of the file timer's named pipe, or "
                           "unset it for one in the launcher's run directory");
        o.file_timer_path = p->second;
      }
    } else if (!it->second.empty() && it->second != "0") {
      o.notes.push_back("TORCHELASTIC_ENABLE_FILE_TIMER=" + it->second +
                        " is not 1: no file timer is served (torchrun turns it on only for 1)");
    }
  }
  if (auto v = r.value("duplicate_stdout_filters"))
    o.logs.dup_stdout_filters = usage_checked([&] { return parse_filter_list(v->first, v->second); });
  if (auto v = r.value("duplicate_stderr_filters"))
    o.logs.dup_stderr_filters = usage_checked([&] { return parse_filter_list(v->first, v->second); });
  if (auto v = r.value("logs_specs"); v && !v->first.empty() && v->first != "default")
    throw UsageError(r.given_as("logs_specs", *v) +
                     ": torchrun loads this as a Python entry point (torchrun.logs_specs), which a native launcher "
                     "cannot; drop it and use --log_dir, --redirects, --tee, --local_ranks_filter and "
                     "--log_line_prefix_template (torchrun's default log spec)");
}

// Signals, devices and CPUs, and what the launcher reports.
// Straggler verdicts and the trace (straggler_scores.h, trace_file.h).
void read_straggler_and_trace(OptionReader& r, LaunchOptions& o) {
  if (auto v = r.value("straggler_threshold")) {
    const auto s = parse_finite_double(v->first);
    if (!s || *s < 0 || *s > 1)
      throw UsageError(r.given_as("straggler_threshold", *v) +
                       ": not a score between 0 and 1; give how slow a rank may be against the fastest before it is "
                       "named (0.8: its own work a step takes 1.25 times the fastest rank's), or 0 to never name one");
    o.straggler_threshold = *s;
  }
  if (auto v = r.value("straggler_window")) {
    const auto s = parse_finite_double(v->first);
    if (!s || *s < 1 || *s > 86400)
      throw UsageError(r.given_as("straggler_window", *v) +
                       ": not a number of seconds from 1 to 86400; give how many seconds of steps each straggler "
                       "verdict compares (default 30)");
    o.straggler_window_s = *s;
  }
  if (auto v = r.value("trace_file")) {
    if (v->first.empty())
      throw UsageError(r.given_as("trace_file", *v) + ": empty path; give the file to write the trace to");
    o.trace_file = v->first;
    o.trace_file_source = r.given_as("trace_file", *v);
  }
  o.python_heartbeat = r.flag("python_heartbeat");
}

void read_signals_devices_reports(OptionReader& r, LaunchOptions& o) {
  if (auto v = r.value("signals_to_handle"))
    o.signals_to_handle = usage_checked([&] { return parse_signal_list(v->first, v->second); });
  o.virtual_local_rank = r.flag("virtual_local_rank");
  if (auto v = r.value("event_log_handler")) {
    // torchrun's registered handlers: dynamic_rendezvous is a null handler for the agent's events.
    if (v->first == "null" || v->first == "dynamic_rendezvous" || v->first.empty()) o.event_log_handler = EventLogHandler::Null;
    else if (v->first == "console") o.event_log_handler = EventLogHandler::Console;
    else
      throw UsageError(r.given_as("event_log_handler", *v) +
                       ": not an event log handler; use null (the default) or console (one JSON line per event on "
                       "stderr); handlers registered from Python cannot be loaded by a native launcher");
  }
  if (auto v = r.value("numa_binding"); v && !v->first.empty()) {
    if (v->first != "node" && v->first != "socket" && v->first != "exclusive" && v->first != "core-complex")
      throw UsageError(r.given_as("numa_binding", *v) + ": not a NUMA binding mode; use node, socket, exclusive or "
                       "core-complex");
    o.numa_binding = v->first;
    o.numa_binding_source = r.given_as("numa_binding", *v);
  }
  if (auto v = r.value("summary_json")) {
    if (v->first.empty()) throw UsageError(v->second + ": empty path; give the file to write the summary to");
    o.summary_json = v->first;
    o.summary_json_source = r.given_as("summary_json", *v);
  }
  read_straggler_and_trace(r, o);

}

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

LaunchOptions parse_launch_options(const std::vector<std::string>& args, const EnvMap& env) {
  const po::options_description desc = make_description();

  // Split the launcher's own arguments from the program and its arguments:
  // the first token that is not an option (or follows "--") is the program.
  // spelling: underscore name -> the option as the user typed it, so every
  // message names what they wrote.
  std::vector<std::string> mine;
  std::map<std::string, std::string> spelling;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;
    const std::string n = normalise(a);
    const std::string typed = a.substr(0, a.find('='));
    const po::option_description* o = nullptr;
    if (n.compare(0, 2, "--") == 0) {
      // An empty name ("--=x") matches every option: find_nothrow throws.
      const std::string name = n.substr(2, n.find('=') - 2);
      if (!name.empty()) o = desc.find_nothrow(name, false);
      if (!o) throw UsageError("unrecognised option '" + (name.empty() ? a : typed) + "'");
    } else if (n.size() == 2) {
      o = desc.find_nothrow(n, false);
    }
    if (o) spelling[o->long_name()] = typed;
    mine.push_back(n);
    if (o && n.find('=') == std::string::npos && !is_flag(*o) && i + 1 < args.size()) mine.push_back(args[++i]);
  }

  po::variables_map vm;
  try {
    using namespace po::command_line_style;
    po::store(po::command_line_parser(mine)
                  .options(desc)
                  .style(default_style & ~allow_guessing)
                  .run(),
              vm);
  } catch (const po::error& e) {
    std::string msg = e.what();
    for (const auto& [name, typed] : spelling) {  // Program_options names the normalised spelling
      const std::string norm = "'--" + name + "'";
      if (auto at = msg.find(norm); at != std::string::npos) msg.replace(at, norm.size(), "'" + typed + "'");
    }
    throw UsageError(msg);
  }

  LaunchOptions o;
  if (i < args.size()) {
    o.program = args[i];
    o.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  }
  o.help = vm.count("help") > 0;
  o.version = vm.count("version") > 0;
  if (o.help || o.version) return o;

  // Each part in the order its errors are reported.
  OptionReader r(vm, env, spelling, o);
  read_torchrun_only(r, o);
  read_placement(r, o);
  read_program_style(r, o);
  read_restarts_and_timeouts(r, o);
  read_logs(r, o);
  read_signals_devices_reports(r, o);

  if (o.program.empty())
    throw UsageError("missing program: give the script, module or executable to run after the options");
  check_free_port(o);
  return o;
}

void check_free_port(const LaunchOptions& o) {
  if (o.free_port_source.empty()) return;
  const bool c10d = o.rdzv.elastic();
  if (c10d && o.rdzv.is_host == "0")
    throw UsageError(o.free_port_source + " with --rdzv_conf is_host=0: port 0 means this node hosts the rendezvous "
                     "store on a free port; drop is_host=0, or give the port of the store to join");
  const int nodes = c10d ? o.rdzv.max_nodes : o.nnodes;
  if (nodes <= 1) return;
  // A fixed port in the form it was given: the option and torchrun's default port for it.
  const std::string typed = o.free_port_source.substr(0, o.free_port_source.find_first_of(" ="));
  const bool endpoint = typed.find("ENDPOINT") != std::string::npos || typed.find("endpoint") != std::string::npos;
  const std::string host = o.rdzv.host.find(':') != std::string::npos ? "[" + o.rdzv.host + "]" : o.rdzv.host;
  const std::string port = c10d ? "29400" : "29500";
  const std::string example = endpoint ? typed + (typed.compare(0, 2, "--") == 0 ? " " : "=") + host + ":" + port
                                       : typed + (typed.compare(0, 2, "--") == 0 ? " " : "=") + port;
  throw UsageError(o.free_port_source + ": port 0 (a free port) works for a one-node job only, and this job has " +
                   (c10d && o.rdzv.min_nodes != o.rdzv.max_nodes ? "up to " : "") + std::to_string(nodes) +
                   " nodes: the other nodes could not know which port this node picked; give a fixed port, e.g. " +
                   example);
}

std::string version_text() { return "ddp-launch " DDP_LAUNCH_VERSION; }

}  // namespace ddp::launcher
