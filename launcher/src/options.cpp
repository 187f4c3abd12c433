#include "ddp/launcher/options.h"

#include "ddp/common/parse.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cctype>
#include <dlfcn.h>
#include <sched.h>
#include <sstream>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace ddp::launcher {
namespace po = boost::program_options;

namespace {

// Every option the launcher knows, underscore spelling. Values are kept as
// strings so that range errors can name the value the user typed.
po::options_description make_description() {
  po::options_description d("Options (each also as --x-y, and as PET_X_Y in the environment)");
  d.add_options()
      ("help,h", "show this help and exit")
      ("version", "show the version and exit")
      ("nproc_per_node", po::value<std::string>()->value_name("N|cpu|gpu|auto"),
       "workers on this node (default 1); cpu = CPU count, gpu = NVIDIA GPU count, auto = gpu if any else cpu")
      ("nnodes", po::value<std::string>()->value_name("N"), "number of nodes (default 1; N:N also accepted)")
      ("node_rank", po::value<std::string>()->value_name("R"), "rank of this node, 0..nnodes-1 (default 0)")
      ("master_addr", po::value<std::string>()->value_name("HOST"), "address of rank 0's node (default 127.0.0.1)")
      ("master_port", po::value<std::string>()->value_name("PORT"), "port of the rendezvous store (default 29500)")
      ("standalone", "single node on a free port (like torchrun --standalone)")
      ("use_env", "do not pass --local_rank=N to workers (they read LOCAL_RANK)")
      ("no_python", "run the program directly, never through python")
      ("module,m", "run the program as a Python module (python -m)")
      ("role", po::value<std::string>()->value_name("NAME"), "worker role name (default 'default')")
      ("rdzv_id", po::value<std::string>()->value_name("ID"), "run id shown to workers as TORCHELASTIC_RUN_ID (default 'none')")
      ("max_restarts", po::value<std::string>()->value_name("K"), "restart the whole group up to K times after a failure (default 0)")
      ("shutdown_timeout", po::value<std::string>()->value_name("SECONDS"),
       "grace period between SIGTERM and SIGKILL when tearing down (default 30)");
  return d;
}

bool is_flag(const po::option_description& o) { return o.semantic()->max_tokens() == 0; }

// --x-y[=v] -> --x_y[=v]; single-dash short options are left alone.
std::string normalise(const std::string& arg) {
  if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) return arg;
  auto eq = arg.find('=');
  std::string name = arg.substr(0, eq);
  std::replace(name.begin() + 2, name.end(), '-', '_');
  return eq == std::string::npos ? name : name + arg.substr(eq);
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

// Wraps parse errors so the message names the option and where it came from.
template <typename F>
auto checked(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
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
  std::vector<std::string> mine;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;
    std::string n = normalise(a);
    mine.push_back(n);
    if (n.compare(0, 2, "--") == 0 && n.find('=') == std::string::npos) {
      const po::option_description* o = desc.find_nothrow(n.substr(2), false);
      if (o && !is_flag(*o) && i + 1 < args.size()) mine.push_back(args[++i]);
    }
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
    throw UsageError(e.what());
  }

  LaunchOptions o;
  if (i < args.size()) {
    o.program = args[i];
    o.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  }

  // Command line first, then PET_<NAME>, then the default.
  auto value = [&](const char* name) -> std::optional<std::pair<std::string, std::string>> {
    if (vm.count(name)) return std::make_pair(vm[name].as<std::string>(), "--" + std::string(name));
    std::string var = "PET_" + upper(name);
    if (auto it = env.find(var); it != env.end()) return std::make_pair(it->second, var);
    return std::nullopt;
  };
  auto flag = [&](const char* name) -> bool {
    if (vm.count(name)) return true;
    std::string var = "PET_" + upper(name);
    if (auto it = env.find(var); it != env.end()) return checked([&] { return parse_bool(it->second, var); });
    return false;
  };

  o.help = vm.count("help") > 0;
  o.version = vm.count("version") > 0;
  if (o.help || o.version) return o;

  if (auto v = value("nproc_per_node")) {
    o.nproc_spec = v->first;
    if (o.nproc_spec != "cpu" && o.nproc_spec != "gpu" && o.nproc_spec != "auto") {
      try {
        o.nproc_per_node = static_cast<int>(parse_int(v->first, v->second, 1, 1 << 16));
      } catch (const std::invalid_argument&) {
        throw UsageError(v->second + ": '" + v->first +
                         "' is not a worker count; give an integer >= 1, cpu, gpu or auto");
      }
    }
  }
  if (auto v = value("nnodes")) {
    std::string text = v->first;
    if (auto colon = text.find(':'); colon != std::string::npos) {
      std::string lo = text.substr(0, colon), hi = text.substr(colon + 1);
      if (lo != hi)
        throw UsageError(v->second + ": elastic range '" + text +
                         "' is not supported, give a fixed node count such as " + hi);
      text = lo;
    }
    o.nnodes = static_cast<int>(checked([&] { return parse_int(text, v->second, 1, 1 << 20); }));
  }
  if (auto v = value("node_rank"))
    o.node_rank = static_cast<int>(checked([&] { return parse_int(v->first, v->second, 0, 1 << 20); }));
  if (o.node_rank >= o.nnodes)
    throw UsageError("--node_rank " + std::to_string(o.node_rank) + " must be below --nnodes " +
                     std::to_string(o.nnodes) + " (node ranks are 0.." + std::to_string(o.nnodes - 1) + ")");
  if (auto v = value("master_addr")) {
    if (v->first.empty()) throw UsageError(v->second + ": empty address, give a host name or IP of rank 0's node");
    o.master_addr = v->first;
  }
  if (auto v = value("master_port"))
    o.master_port = static_cast<int>(checked([&] { return parse_int(v->first, v->second, 1, 65535); }));
  o.standalone = flag("standalone");
  if (o.standalone) {
    if (o.nnodes != 1)
      throw UsageError("--standalone runs one node, but --nnodes is " + std::to_string(o.nnodes));
    o.master_addr = "127.0.0.1";
    o.master_port = 0;  // picked when the group starts
  }
  o.use_env = flag("use_env");
  o.no_python = flag("no_python");
  o.module = flag("module");
  if (o.no_python && o.module)
    throw UsageError("--no_python and --module exclude each other: a module runs through python");
  if (auto v = value("role")) {
    if (v->first.empty()) throw UsageError(v->second + ": empty role name");
    o.role = v->first;
  }
  if (auto v = value("rdzv_id")) o.run_id = v->first;
  if (auto v = value("max_restarts"))
    o.max_restarts = static_cast<int>(checked([&] { return parse_int(v->first, v->second, 0, 1000000); }));
  if (auto v = value("shutdown_timeout"))
    o.shutdown_timeout_s = checked([&] { return parse_seconds(v->first, v->second); });

  if (o.program.empty())
    throw UsageError("missing program: give the script, module or executable to run after the options");
  return o;
}

HostCounts probe_host(bool with_gpus) {
  HostCounts h;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) h.cpus = std::max(1, CPU_COUNT(&set));
  else h.cpus = std::max(1u, std::thread::hardware_concurrency());

  // The CUDA driver API answers with CUDA_VISIBLE_DEVICES applied, without
  // LibTorch or the runtime. No driver means no GPU.
  if (!with_gpus) return h;
  if (void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    using InitFn = int (*)(unsigned);
    using CountFn = int (*)(int*);
    auto init = reinterpret_cast<InitFn>(::dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<CountFn>(::dlsym(lib, "cuDeviceGetCount"));
    int n = 0;
    if (init && count && init(0) == 0 && count(&n) == 0) h.gpus = n;
    ::dlclose(lib);
  }
  return h;
}

int resolve_nproc(const std::string& spec, const HostCounts& host) {
  if (spec == "cpu") return host.cpus;
  if (spec == "gpu") {
    if (host.gpus <= 0)
      throw UsageError("--nproc_per_node gpu: no NVIDIA GPU is visible (no CUDA driver, or "
                       "CUDA_VISIBLE_DEVICES hides them); give a number or use cpu");
    return host.gpus;
  }
  if (spec == "auto") return host.gpus > 0 ? host.gpus : host.cpus;
  return static_cast<int>(checked([&] { return parse_int(spec, "--nproc_per_node", 1, 1 << 16); }));
}

std::string usage_text() {
  std::ostringstream s;
  s << "Usage: ddp-launch [options] PROGRAM [ARGS...]\n"
       "Starts --nproc_per_node workers with the torchrun environment (RANK, LOCAL_RANK,\n"
       "WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), supervises them, tears the group down\n"
       "when one fails and exits with the failing worker's exit code.\n"
       "PROGRAM: a .py script (run as python3 -u), a module with -m, or an executable.\n"
       "Unless --use_env is given, each worker also gets --local_rank=N (torch.distributed.launch).\n\n"
    << make_description();
  return s.str();
}

std::string version_text() { return "ddp-launch " DDP_LAUNCH_VERSION; }

}  // namespace ddp::launcher
