#include "ddp/launcher/config/options.h"

#include <catch2/catch.hpp>

#include "usage_message.h"

#include <regex>
#include <csignal>

using namespace ddp::launcher;
using ddp::test::usage_message;

namespace {
LaunchOptions parse(std::vector<std::string> args, EnvMap env = {}) { return parse_launch_options(args, env); }

}  // namespace

TEST_CASE("defaults match torchrun") {
  auto o = parse({"train.py"});
  CHECK(o.nproc_spec == "1");
  CHECK(o.nnodes == 1);
  CHECK(o.node_rank == 0);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK(o.master_port == 29500);
  CHECK(o.role == "default");
  CHECK(o.run_id == "none");
  CHECK(o.max_restarts == 0);
  CHECK(o.shutdown_timeout_s == 30.0);
  CHECK_FALSE(o.use_env);
  CHECK(o.program == "train.py");
  CHECK(o.program_args.empty());
}

TEST_CASE("both spellings, = and space forms") {
  for (auto args : std::vector<std::vector<std::string>>{
           {"--nproc_per_node=4", "--master_port=1234", "--node_rank=1", "--nnodes=2", "x"},
           {"--nproc-per-node", "4", "--master-port", "1234", "--node-rank", "1", "--nnodes", "2", "x"},
           {"--nproc-per-node=4", "--master_port", "1234", "--node_rank=1", "--nnodes=2", "x"}}) {
    auto o = parse(args);
    CHECK(o.nproc_spec == "4");
    CHECK(o.master_port == 1234);
    CHECK(o.node_rank == 1);
    CHECK(o.nnodes == 2);
  }
  CHECK(parse({"--use-env", "x"}).use_env);
  CHECK(parse({"--use_env", "x"}).use_env);
  CHECK(parse({"--no-python", "x"}).no_python);
  CHECK(parse({"--max-restarts=3", "x"}).max_restarts == 3);
  CHECK(parse({"--shutdown-timeout", "0.5", "x"}).shutdown_timeout_s == 0.5);
  CHECK(parse({"--master-addr", "node7", "x"}).master_addr == "node7");
  CHECK(parse({"--role", "trainer", "x"}).role == "trainer");
  CHECK(parse({"--nnodes=2:2", "x"}).nnodes == 2);
}

TEST_CASE("everything from the program on belongs to the program") {
  auto o = parse({"--nproc_per_node=2", "train.py", "--nproc_per_node=9", "--epochs", "3", "--", "-x"});
  CHECK(o.nproc_spec == "2");
  CHECK(o.program == "train.py");
  CHECK(o.program_args == std::vector<std::string>{"--nproc_per_node=9", "--epochs", "3", "--", "-x"});
  auto d = parse({"--", "-weird-name", "a"});
  CHECK(d.program == "-weird-name");
  CHECK(d.program_args == std::vector<std::string>{"a"});
  auto m = parse({"-m", "pkg.train", "--lr", "1"});
  CHECK(m.module);
  CHECK(m.program == "pkg.train");
  CHECK(m.program_args == std::vector<std::string>{"--lr", "1"});
}

TEST_CASE("PET_ variables configure, the command line wins") {
  EnvMap env{{"PET_NPROC_PER_NODE", "3"}, {"PET_MASTER_PORT", "4000"}, {"PET_USE_ENV", "1"},
             {"PET_MAX_RESTARTS", "2"}, {"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}};
  auto o = parse({"x"}, env);
  CHECK(o.nproc_spec == "3");
  CHECK(o.master_port == 4000);
  CHECK(o.use_env);
  CHECK(o.max_restarts == 2);
  CHECK(o.node_rank == 1);
  auto c = parse({"--nproc_per_node=5", "--master_port=5000", "x"}, env);
  CHECK(c.nproc_spec == "5");
  CHECK(c.master_port == 5000);
  CHECK_FALSE(parse({"x"}, {{"PET_USE_ENV", "0"}}).use_env);
  CHECK(usage_message({"x"}, {{"PET_USE_ENV", "maybe"}}).find("PET_USE_ENV") != std::string::npos);
  CHECK(usage_message({"x"}, {{"PET_NPROC_PER_NODE", "zero"}}).find("PET_NPROC_PER_NODE: 'zero'") !=
        std::string::npos);
}

TEST_CASE("standalone picks a free port on one node") {
  auto o = parse({"--standalone", "x"});
  CHECK(o.standalone);
  CHECK(o.master_port == 0);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK(usage_message({"--standalone", "--nnodes=2", "x"}).find("--nnodes is 2") != std::string::npos);
}

TEST_CASE("bad input names the value") {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--bogus", "x"}, "--bogus"},
      {{"--nproc_per_node=0", "x"}, "'0' is not a worker count; give an integer from 1 to 65536"},
      {{"--nproc_per_node=70000", "x"}, "from 1 to 65536"},
      {{"--nproc_per_node=-2", "x"}, "'-2'"},
      {{"--nproc_per_node=many", "x"}, "'many'"},
      {{"--nnodes=0", "x"}, "--nnodes: 0 is out of range"},
      {{"--nnodes=1:4", "x"}, "--nnodes 1:4: a node range needs --rdzv_backend c10d (static rendezvous has a fixed node count; give --nnodes 4"},
      {{"--nnodes=2", "--node_rank=2", "x"}, "--node_rank 2 must be below --nnodes 2"},
      {{"--node_rank=-1", "x"}, "--node_rank: -1"},
      {{"--master_port=65536", "x"}, "65536"},
      {{"--master_port=http", "x"}, "'http' is not an integer"},
      {{"--max_restarts=-1", "x"}, "--max_restarts: -1"},
      {{"--shutdown_timeout=soon", "x"}, "'soon' is not a number of seconds"},
      {{"--shutdown_timeout=-1", "x"}, "negative"},
      {{"--no_python", "-m", "x"}, "exclude each other"},
      {{"--nproc_per_node=2"}, "missing program"},
      {{}, "missing program"},
      {{"--nproc_per_node"}, "nproc_per_node"},
      {{"--nproc"}, "--nproc"},  // no guessing of abbreviations
  };
  for (const auto& c : cases) {
    INFO("args: " << Catch::Detail::stringify(c.args));
    CHECK_THAT(usage_message(c.args), Catch::Contains(c.expect));
  }
}

TEST_CASE("every number is decimal: hex, spaces and words are refused by every option the same way") {
  struct Case {
    std::vector<std::string> args;
    EnvMap env;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{"--nproc_per_node", "0x2", "x"}, {}, "--nproc_per_node: '0x2' is not a worker count"},
      {{"--nnodes", "0x2", "x"}, {}, "--nnodes: '0x2' is not an integer"},
      {{"--max_restarts", "0x2", "x"}, {}, "--max_restarts: '0x2' is not an integer"},
      {{"--master_port", "0x7530", "x"}, {}, "--master_port: '0x7530' is not an integer"},
      {{"--shutdown_timeout", "0x10", "x"}, {}, "--shutdown_timeout: '0x10' is not a number of seconds"},
      {{"--shutdown_timeout", " 5", "x"}, {}, "--shutdown_timeout: ' 5' is not a number of seconds"},
      {{"--monitor_interval", "0x1", "x"}, {}, "--monitor_interval: '0x1' is not a number of seconds"},
      {{"--stall_timeout", "0x10", "x"}, {}, "--stall_timeout 0x10: not a number of seconds"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=h", "--rdzv_conf=join_timeout=0x10", "x"}, {},
       "--rdzv_conf join_timeout: '0x10' is not a number of seconds"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=h:0x7530", "x"}, {}, "--rdzv_endpoint port: '0x7530' is not an integer"},
      {{"x"}, {{"PET_SHUTDOWN_TIMEOUT", "0x10"}}, "PET_SHUTDOWN_TIMEOUT: '0x10' is not a number of seconds"},
      {{"x"}, {{"PET_STALL_TIMEOUT", "inf"}}, "PET_STALL_TIMEOUT=inf: not a number of seconds"},
  };
  for (const auto& c : cases) {
    INFO("args: " << Catch::Detail::stringify(c.args));
    CHECK_THAT(usage_message(c.args, c.env), Catch::StartsWith(c.expect));
  }
  // Decimal spellings stay: leading zeros are decimal (as Python's int("010")), exponents are fine.
  CHECK(parse({"--max_restarts", "010", "x"}).max_restarts == 10);
  CHECK(parse({"--shutdown_timeout", "1e1", "x"}).shutdown_timeout_s == 10);
  CHECK(parse({"--shutdown_timeout", ".5", "x"}).shutdown_timeout_s == 0.5);
}

TEST_CASE("help and version need no program") {
  CHECK(parse({"--help"}).help);
  CHECK(parse({"-h"}).help);
  CHECK(parse({"--version"}).version);
  CHECK_THAT(usage_text(), Catch::Contains("--nproc_per_node"));
  CHECK_THAT(version_text(), Catch::StartsWith("ddp-launch "));
}

TEST_CASE("nproc cpu, gpu and auto") {
  HostCounts none{8, 0}, two{8, 2};
  CHECK(resolve_nproc("cpu", none) == 8);
  CHECK(resolve_nproc("auto", none) == 8);
  CHECK(resolve_nproc("auto", two) == 2);
  CHECK(resolve_nproc("gpu", two) == 2);
  CHECK(resolve_nproc("3", none) == 3);
  CHECK_THROWS_WITH(resolve_nproc("gpu", none), Catch::Contains("no NVIDIA GPU is visible"));
  CHECK(probe_host(false).cpus >= 1);
  CHECK(probe_host(false).gpus == 0);  // not probed
  CHECK(probe_host(true).gpus >= 0);
}

TEST_CASE("messages name an option as the user spelled it") {
  CHECK_THAT(usage_message({"--bogus-thing", "x"}), Catch::Equals("unrecognised option '--bogus-thing'"));
  CHECK_THAT(usage_message({"--nproc-per-node=0", "x"}), Catch::StartsWith("--nproc-per-node: '0'"));
  CHECK_THAT(usage_message({"--master-port", "http", "x"}), Catch::StartsWith("--master-port: 'http'"));
  CHECK_THAT(usage_message({"--nproc-per-node"}), Catch::Contains("'--nproc-per-node'"));
}

// Found by fuzzing (tests/fuzz/fuzz_options): an option with no name before
// '=' reached Boost's find_nothrow with an empty name, which matches every
// option and throws ambiguous_option past the UsageError handling:
// `ddp-launch --=d x` died of std::terminate (exit 134).
TEST_CASE("an option without a name is unrecognised") {
  CHECK_THAT(usage_message({"--=d", "x"}), Catch::Equals("unrecognised option '--=d'"));
  CHECK_THAT(usage_message({"--=", "x"}), Catch::Equals("unrecognised option '--='"));
}

TEST_CASE("every torchrun option is accepted, and the ones that change nothing are still checked") {
  CHECK(parse({"--rdzv_backend=static", "--tee", "0", "-r", "0", "--start_method=fork", "--monitor-interval=0.1", "x"})
            .program == "x");
  CHECK(parse({"--tee", "0", "train.py", "--tee", "3"}).program_args == std::vector<std::string>{"--tee", "3"});
  CHECK(parse({"--run-path", "x"}).run_path);
  CHECK_THAT(usage_message({"--start-method=thread", "x"}),
             Catch::StartsWith("--start-method thread: not a start method; use spawn, fork or forkserver"));
  CHECK_THAT(usage_message({"--monitor_interval=-1", "x"}), Catch::StartsWith("--monitor_interval"));
  // torchrun lets --run_path win over --no_python and -m (a note says so).
  CHECK(parse({"--run_path", "--no_python", "x"}).run_path);
  CHECK_FALSE(parse({"--run_path", "--no_python", "x"}).no_python);
  CHECK(parse({"--run_path", "--no_python", "x"}).notes ==
        std::vector<std::string>{"--no_python is ignored: --run_path runs the program through python (as torchrun does)"});
  CHECK_FALSE(parse({"--run_path", "-m", "x"}).module);
  CHECK_THAT(usage_message({"x"}, {{"PET_START_METHOD", "thread"}}),
             Catch::StartsWith("PET_START_METHOD=thread: not a start method"));
}

TEST_CASE("etcd-v3 rendezvous options: every member of --rdzv_endpoint, port 2379 by default, elastic as c10d") {
  LaunchOptions o = parse({"--rdzv-backend=etcd-v3", "--rdzv-endpoint=e1,e2:2479,[::1]", "--nnodes=2:4", "x"});
  CHECK(o.rdzv.elastic());
  CHECK(o.rdzv.endpoints == "e1:2379,e2:2479,[::1]:2379");
  CHECK(o.rdzv.host == "e1");
  CHECK(o.rdzv.port == 2379);
  CHECK(o.rdzv.max_nodes == 4);
  CHECK(parse({"x"}, {{"PET_RDZV_BACKEND", "etcd-v3"}, {"PET_RDZV_ENDPOINT", "a:1,b:2"}}).rdzv.endpoints == "a:1,b:2");
}

TEST_CASE("c10d rendezvous options: endpoint, node range, rdzv_conf, as torchrun reads them") {
  LaunchOptions o = parse({"--rdzv-backend=c10d", "--rdzv-endpoint=n1:1234", "--nnodes=1:3", "--node_rank=5",
                           "--rdzv_conf=join_timeout=5,last_call_timeout=0,keep_alive_interval=0.5,"
                           "keep_alive_max_attempt=2,timeout=7,close_timeout=3,is_host=false",
                           "--local-addr=10.0.0.9", "x"});
  CHECK(o.rdzv.elastic());
  CHECK(o.rdzv.host == "n1");
  CHECK(o.rdzv.port == 1234);
  CHECK(o.rdzv.min_nodes == 1);
  CHECK(o.rdzv.max_nodes == 3);
  CHECK(o.node_rank == 0);  // ignored: node ranks come from the rendezvous
  CHECK(o.rdzv.join_timeout_s == 5);
  CHECK(o.rdzv.last_call_timeout_s == 0);
  CHECK(o.rdzv.keep_alive_interval_s == 0.5);
  CHECK(o.rdzv.keep_alive_max_attempt == 2);
  CHECK(o.rdzv.read_timeout_s == 7);
  CHECK(o.rdzv.close_timeout_s == 3);
  CHECK(o.rdzv.is_host == "0");
  CHECK(o.rdzv.local_addr == "10.0.0.9");
  // Endpoint spellings: default port 29400, IPv6 in brackets or bare.
  auto endpoint = [](const std::string& e) {
    const LaunchOptions p = parse({"--rdzv_backend=c10d", "--rdzv_endpoint=" + e, "x"});
    return p.rdzv.host + " " + std::to_string(p.rdzv.port);
  };
  CHECK(endpoint("head") == "head 29400");
  CHECK(endpoint("[::1]:29401") == "::1 29401");
  CHECK(endpoint("[fe80::1]") == "fe80::1 29400");
  CHECK(endpoint("fe80::1") == "fe80::1 29400");
  // Kubernetes elastic PyTorchJobs set the PET_ spellings.
  o = parse({"x"}, {{"PET_RDZV_BACKEND", "c10d"}, {"PET_RDZV_ENDPOINT", "job-master:29400"}, {"PET_NNODES", "2:4"}});
  CHECK(o.rdzv.elastic());
  CHECK(o.rdzv.host == "job-master");
  CHECK(o.rdzv.min_nodes == 2);
  CHECK(o.rdzv.max_nodes == 4);
  // Static rendezvous at --rdzv_endpoint is torchrun's other spelling of --master_addr/--master_port.
  o = parse({"--rdzv_endpoint=h0:2345", "--nnodes=2", "--node_rank=1", "x"});
  CHECK(!o.rdzv.elastic());
  CHECK(o.master_addr == "h0");
  CHECK(o.master_port == 2345);
  // --standalone is one node on a free port whatever the rendezvous options say (torchrun ignores them too).
  for (auto args : {std::vector<std::string>{"--standalone", "--rdzv_backend=c10d", "x"},
                    std::vector<std::string>{"--standalone", "--rdzv_backend=c10d", "--rdzv_endpoint=h:1", "x"}}) {
    o = parse(args);
    CHECK(!o.rdzv.elastic());
    CHECK(o.master_port == 0);
  }
}

TEST_CASE("bad rendezvous options: one line naming the value and what to do") {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--rdzv_backend", "c10d", "x"}, "--rdzv_backend c10d needs --rdzv_endpoint HOST[:PORT]"},
      {{"--rdzv-backend=etcd", "x"},
       "--rdzv-backend etcd: torchrun's etcd rendezvous speaks etcd's removed v2 API and is not supported; use "
       "--rdzv_backend etcd-v3"},
      {{"--rdzv-backend=etcd-v2", "x"}, "--rdzv-backend etcd-v2: torchrun's etcd rendezvous speaks etcd's removed v2"},
      {{"--rdzv-backend=zk", "x"}, "--rdzv-backend zk: unknown rendezvous backend; use static, c10d or etcd-v3"},
      {{"--rdzv_backend", "etcd-v3", "x"}, "--rdzv_backend etcd-v3 needs --rdzv_endpoint HOST[:PORT],HOST[:PORT],..."},
      {{"--rdzv_backend=etcd-v3", "--rdzv_endpoint=e1:2379,e2:0", "x"},
       "--rdzv_endpoint e2:0: port 0 names no etcd member"},
      {{"--rdzv_backend=etcd-v3", "--rdzv_endpoint=e1,:2379", "x"}, "--rdzv_endpoint member :2379: no host"},
      {{"--rdzv_backend=etcd-v3", "--rdzv_endpoint=,,", "x"}, "--rdzv_endpoint ',,': no etcd member"},
      {{"--rdzv-endpoint", "h", "x"}, "--rdzv-endpoint h: static rendezvous needs the port too"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=[::1", "x"}, "--rdzv_endpoint [::1: no ']' after the IPv6 address"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=h:99999", "x"}, "--rdzv_endpoint port: 99999 is out of range"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=:29400", "x"}, "--rdzv_endpoint :29400: no host"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=h", "--rdzv_conf=join_timeout=0", "x"},
       "--rdzv_conf join_timeout=0: must be more than 0 seconds"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=h", "--rdzv_conf=bogus=1", "x"}, "--rdzv_conf: unknown key 'bogus'"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=h", "--rdzv_conf=join_timeout", "x"},
       "--rdzv_conf: 'join_timeout' is not KEY=VALUE"},
      {{"--rdzv_backend=c10d", "--rdzv_endpoint=h", "--rdzv_conf=is_host=maybe", "x"}, "--rdzv_conf is_host"},
      {{"--nnodes", "1:2", "x"}, "--nnodes 1:2: a node range needs --rdzv_backend c10d"},
      {{"--nnodes", "3:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h", "x"}, "--nnodes 3:2: MIN is above MAX"},
      {{"--nnodes", "0:2", "--rdzv_backend=c10d", "--rdzv_endpoint=h", "x"}, "--nnodes MIN: 0 is out of range"},
  };
  for (const auto& c : cases) {
    INFO("args: " << Catch::Detail::stringify(c.args));
    CHECK_THAT(usage_message(c.args), Catch::StartsWith(c.expect));
  }
  CHECK_THAT(usage_message({"x"}, {{"PET_RDZV_BACKEND", "c10d"}}), Catch::StartsWith("--rdzv_backend c10d needs"));
}

TEST_CASE("port 0 in the endpoint or --master_port is a free port on a one-node job, as torchrun's localhost:0") {
  // Static rendezvous: MASTER_PORT 0 here means the supervisor picks one per attempt.
  for (auto args : {std::vector<std::string>{"--rdzv-endpoint=localhost:0", "x"},
                    std::vector<std::string>{"--rdzv_endpoint", "localhost:0", "x"},
                    std::vector<std::string>{"--master_port=0", "x"}, std::vector<std::string>{"--master-port", "0", "x"}}) {
    INFO("args: " << Catch::Detail::stringify(args));
    const LaunchOptions o = parse(args);
    CHECK_FALSE(o.rdzv.elastic());
    CHECK(o.master_port == 0);
    CHECK_FALSE(o.free_port_source.empty());
  }
  CHECK(parse({"--rdzv-endpoint=localhost:0", "x"}).master_addr == "localhost");
  CHECK(parse({"x"}, {{"PET_RDZV_ENDPOINT", "127.0.0.1:0"}}).master_port == 0);
  CHECK(parse({"--rdzv_endpoint=h:0", "x"}).free_port_source == "--rdzv_endpoint h:0");
  CHECK(parse({"x"}, {{"PET_MASTER_PORT", "0"}}).free_port_source == "PET_MASTER_PORT=0");
  // The endpoint wins over --master_port in both directions.
  CHECK(parse({"--master_port=0", "--rdzv_endpoint=h:7", "x"}).free_port_source.empty());
  CHECK(parse({"--master_port=7", "--rdzv_endpoint=h:0", "x"}).master_port == 0);
  // c10d: the rendezvous store on a free port (the workers' port is the rendezvous' anyway).
  const LaunchOptions c = parse({"--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--nnodes=1", "x"});
  CHECK(c.rdzv.elastic());
  CHECK(c.rdzv.port == 0);
  CHECK(c.free_port_source == "--rdzv_endpoint localhost:0");
  CHECK(parse({"--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--nnodes=1:1", "x"}).rdzv.port == 0);
  // --standalone's free port is its own (no node count to check beyond its own).
  CHECK(parse({"--standalone", "--rdzv_endpoint=h:0", "x"}).free_port_source.empty());
}

TEST_CASE("port 0 with more than one node is refused: the other nodes could not know the port") {
  const std::string why = ": port 0 (a free port) works for a one-node job only, and this job has ";
  CHECK(usage_message({"--rdzv-endpoint=localhost:0", "--nnodes=2", "x"}) ==
        "--rdzv-endpoint localhost:0" + why +
            "2 nodes: the other nodes could not know which port this node picked; give a fixed port, "
            "e.g. --rdzv-endpoint localhost:29500");
  CHECK_THAT(usage_message({"--master_port=0", "--nnodes=3", "--node_rank=1", "x"}),
             Catch::StartsWith("--master_port 0" + why + "3 nodes") && Catch::EndsWith("e.g. --master_port 29500"));
  CHECK_THAT(usage_message({"--rdzv_backend=c10d", "--rdzv_endpoint=h:0", "--nnodes=2", "x"}),
             Catch::StartsWith("--rdzv_endpoint h:0" + why + "2 nodes") && Catch::EndsWith("e.g. --rdzv_endpoint h:29400"));
  CHECK_THAT(usage_message({"--rdzv_backend=c10d", "--rdzv_endpoint=h:0", "--nnodes=1:2", "x"}),
             Catch::StartsWith("--rdzv_endpoint h:0" + why + "up to 2 nodes"));
  CHECK(usage_message({"--rdzv_backend=c10d", "--rdzv_endpoint=h:0", "--rdzv_conf=is_host=0", "x"}) ==
        "--rdzv_endpoint h:0 with --rdzv_conf is_host=0: port 0 means this node hosts the rendezvous store on a free "
        "port; drop is_host=0, or give the port of the store to join");
  // Still a port: nothing above 65535, nothing that is not a number.
  CHECK_THAT(usage_message({"--rdzv_endpoint=h:65536", "x"}), Catch::StartsWith("--rdzv_endpoint port: 65536 is out of range, expected [0, 65535]"));
  CHECK_THAT(usage_message({"--master_port=-1", "x"}), Catch::StartsWith("--master_port: -1 is out of range, expected [0, 65535]"));
}

TEST_CASE("help text names PYTHON_EXEC, the PET_ variables and the rendezvous options") {
  CHECK_THAT(usage_text(), Catch::Contains("PYTHON_EXEC") && Catch::Contains("PET_") &&
                               Catch::Contains("--rdzv_conf") && Catch::Contains("--rdzv_backend") &&
                               Catch::Contains("stdin goes to local rank 0"));
}

TEST_CASE("torchrun 2.x's newer options: both spellings, PET_ variables, defaults") {
  LaunchOptions d = parse({"x"});
  CHECK(d.signals_to_handle == std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT});
  CHECK_FALSE(d.virtual_local_rank);
  CHECK(d.event_log_handler == EventLogHandler::Null);
  CHECK(d.numa_binding.empty());
  CHECK(d.logs.dup_stdout_filters.empty());
  CHECK(d.logs.dup_stderr_filters.empty());

  for (const std::string spelling : {"--signals-to-handle", "--signals_to_handle"})
    CHECK(parse({spelling, "SIGTERM, SIGUSR1,SIGUSR2,SIGTERM", "x"}).signals_to_handle ==
          std::vector<int>{SIGTERM, SIGUSR1, SIGUSR2});
  CHECK(parse({"x"}, {{"PET_SIGNALS_TO_HANDLE", "SIGINT"}}).signals_to_handle == std::vector<int>{SIGINT});
  CHECK(parse({"--virtual-local-rank", "x"}).virtual_local_rank);
  CHECK(parse({"--virtual_local_rank", "x"}).virtual_local_rank);
  CHECK(parse({"x"}, {{"PET_VIRTUAL_LOCAL_RANK", "1"}}).virtual_local_rank);
  CHECK(parse({"--duplicate-stdout-filters", "loss,,acc,step", "x"}).logs.dup_stdout_filters ==
        std::vector<std::string>{"loss,acc", "step"});
  CHECK(parse({"--duplicate_stderr_filters=NaN", "x"}).logs.dup_stderr_filters == std::vector<std::string>{"NaN"});
  CHECK(parse({"x"}, {{"PET_DUPLICATE_STDERR_FILTERS", "a"}}).logs.dup_stderr_filters ==
        std::vector<std::string>{"a"});
  CHECK(parse({"--duplicate-stdout-filters", "", "x"}).logs.dup_stdout_filters.empty());
  CHECK(parse({"--event-log-handler", "console", "x"}).event_log_handler == EventLogHandler::Console);
  CHECK(parse({"--event_log_handler=dynamic_rendezvous", "x"}).event_log_handler == EventLogHandler::Null);
  CHECK(parse({"x"}, {{"PET_EVENT_LOG_HANDLER", "console"}}).event_log_handler == EventLogHandler::Console);
  CHECK(parse({"--logs-specs", "default", "x"}).program == "x");
  CHECK(parse({"--logs_specs=default", "x"}).program == "x");
  for (const std::string mode : {"node", "socket", "exclusive", "core-complex"}) {
    CHECK(parse({"--numa-binding", mode, "x"}).numa_binding == mode);
    CHECK(parse({"--numa_binding=" + mode, "x"}).numa_binding == mode);
  }
  CHECK(parse({"x"}, {{"PET_NUMA_BINDING", "socket"}}).numa_binding == "socket");
}

TEST_CASE("torchrun 2.x's newer options: bad values are one line naming the value") {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--signals-to-handle", "SIGTERM,SIGFOO", "x"},
       "--signals-to-handle 'SIGTERM,SIGFOO': 'SIGFOO' is not a signal name; write it as Python's signal module does"},
      {{"--signals_to_handle=USR1", "x"}, "--signals_to_handle 'USR1': 'USR1' is not a signal name"},
      {{"--signals_to_handle=SIGTERM,,SIGINT", "x"}, "--signals_to_handle 'SIGTERM,,SIGINT': empty signal name"},
      {{"--signals_to_handle=SIGKILL", "x"}, "--signals_to_handle 'SIGKILL': SIGKILL cannot be caught by any process"},
      {{"--signals_to_handle=SIGSTOP", "x"}, "--signals_to_handle 'SIGSTOP': SIGSTOP cannot be caught"},
      {{"--signals_to_handle=SIGCHLD", "x"}, "--signals_to_handle 'SIGCHLD': SIGCHLD is the launcher's own"},
      {{"--signals_to_handle=SIGPIPE", "x"}, "--signals_to_handle 'SIGPIPE': SIGPIPE is the launcher's own"},
      {{"--duplicate-stdout-filters", "loss,", "x"},
       "--duplicate-stdout-filters 'loss,': an empty filter would copy every line"},
      {{"--duplicate_stderr_filters=,a", "x"}, "--duplicate_stderr_filters ',a': an empty filter"},
      {{"--event-log-handler", "scuba", "x"},
       "--event-log-handler scuba: not an event log handler; use null (the default) or console"},
      {{"--logs-specs", "my_specs", "x"},
       "--logs-specs my_specs: torchrun loads this as a Python entry point (torchrun.logs_specs), which a native "
       "launcher cannot; drop it and use --log_dir, --redirects, --tee"},
      {{"--numa-binding", "numa", "x"},
       "--numa-binding numa: not a NUMA binding mode; use node, socket, exclusive or core-complex"},
  };
  for (const auto& c : cases) {
    INFO("args: " << Catch::Detail::stringify(c.args));
    CHECK_THAT(usage_message(c.args), Catch::StartsWith(c.expect));
  }
  CHECK_THAT(usage_message({"x"}, {{"PET_SIGNALS_TO_HANDLE", "SIGNOPE"}}),
             Catch::StartsWith("PET_SIGNALS_TO_HANDLE 'SIGNOPE': 'SIGNOPE' is not a signal name"));
  CHECK_THAT(usage_message({"x"}, {{"PET_EVENT_LOG_HANDLER", "x"}}),
             Catch::StartsWith("PET_EVENT_LOG_HANDLER=x: not an event log handler"));
}

TEST_CASE("signal lists: Python's names and aliases, the text workers see") {
  CHECK(parse_signal_list("SIGIOT,SIGPOLL,SIGABRT", "s") == std::vector<int>{SIGABRT, SIGIO});
  CHECK(parse_signal_list(" SIGRTMIN ,SIGRTMAX", "s") == std::vector<int>{SIGRTMIN, SIGRTMAX});
  CHECK(signal_list_text({SIGTERM, SIGUSR1, SIGRTMIN}) == "SIGTERM,SIGUSR1,SIGRTMIN");
  CHECK(signal_list_text(default_handled_signals()) == kDefaultSignalsToHandle);
  CHECK_THROWS_WITH(parse_signal_list("sigterm", "--signals_to_handle"),
                    Catch::StartsWith("--signals_to_handle 'sigterm': 'sigterm' is not a signal name"));
}

TEST_CASE("help text has torchrun 2.x's newer options and no 'not supported'") {
  const std::string help = usage_text();
  for (const char* o : {"--signals_to_handle", "--virtual_local_rank", "--duplicate_stdout_filters",
                        "--duplicate_stderr_filters", "--event_log_handler", "--logs_specs", "--numa_binding"})
    CHECK_THAT(help, Catch::Contains(o));
  CHECK_THAT(help, !Catch::Contains("not supported") && !Catch::Contains("not implemented"));
}

TEST_CASE("standalone gives each run a fresh uuid4 run id, as torchrun, and ignores --rdzv_id") {
  const std::regex uuid4("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
  const auto a = parse({"--standalone", "x"});
  const auto b = parse({"--standalone", "x"});
  CHECK(std::regex_match(a.run_id, uuid4));
  CHECK(std::regex_match(b.run_id, uuid4));
  CHECK(a.run_id != b.run_id);  // tools keyed on TORCHELASTIC_RUN_ID tell the runs apart
  const auto given = parse({"--standalone", "--rdzv_id=job7", "x"});
  CHECK(std::regex_match(given.run_id, uuid4));
  CHECK(given.notes ==
        std::vector<std::string>{"--standalone picks its own rendezvous on this machine; ignoring --rdzv_id"});
  CHECK(parse({"x"}).run_id == "none");
  CHECK(parse({"--rdzv_id=job7", "x"}).run_id == "job7");
}

TEST_CASE("standalone says in one line which rendezvous options it ignores, and runs") {
  auto o = parse({"--standalone", "--master_addr=h", "--master-port", "1234", "--rdzv_endpoint=e:1", "x"});
  CHECK(o.master_port == 0);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK(o.notes == std::vector<std::string>{"--standalone picks its own rendezvous on this machine; ignoring "
                                            "--master_addr, --master-port, --rdzv_endpoint"});
  CHECK(parse({"--standalone", "x"}, {{"PET_MASTER_PORT", "5"}}).notes ==
        std::vector<std::string>{"--standalone picks its own rendezvous on this machine; ignoring PET_MASTER_PORT"});
  CHECK(parse({"--standalone", "x"}).notes.empty());
  CHECK(parse({"--master_addr=h", "x"}).notes.empty());
}

TEST_CASE("PET_ flags take the usual boolean spellings and name the accepted ones otherwise") {
  for (const char* t : {"1", "true", "TRUE", "yes", "On"}) CHECK(parse({"x"}, {{"PET_USE_ENV", t}}).use_env);
  for (const char* f : {"0", "false", "No", "OFF", ""}) CHECK_FALSE(parse({"x"}, {{"PET_USE_ENV", f}}).use_env);
  CHECK_THAT(usage_message({"x"}, {{"PET_USE_ENV", "enabled"}}),
             Catch::StartsWith("PET_USE_ENV: 'enabled' is not a boolean; use 1/0, true/false, yes/no or on/off"));
}

TEST_CASE("the hot spares option (--hot_spares): a count of nodes beyond --nnodes, from the command line or PET_HOT_SPARES, a negative or "
          "impossible count, or static rendezvous, is one line naming the value and what to do") {
  const std::vector<std::string> c10d = {"--nnodes=4", "--rdzv_backend=c10d", "--rdzv_endpoint=h"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = c10d;
    a.insert(a.end(), more.begin(), more.end());
    a.push_back("x");
    return a;
  };
  CHECK(parse(with({})).rdzv.hot_spares == 0);
  CHECK(parse(with({"--hot-spares", "2"})).rdzv.hot_spares == 2);
  CHECK(parse(with({}), {{"PET_HOT_SPARES", "3"}}).rdzv.hot_spares == 3);
  CHECK(parse(with({"--hot_spares=1"}), {{"PET_HOT_SPARES", "3"}}).rdzv.hot_spares == 1);
  CHECK(parse(with({"--hot_spares=1048572"})).rdzv.hot_spares == 1048572);
  CHECK(usage_message(with({"--hot_spares=-1"})) ==
        "--hot_spares -1: not a spare node count; give 0 to 1048572 (nodes beyond --nnodes 4 that stand "
        "by; 1048576 nodes in all at most)");
  CHECK_THAT(usage_message(with({"--hot_spares=1048573"})),
             Catch::StartsWith("--hot_spares 1048573: not a spare node count"));
  CHECK_THAT(usage_message(with({}), {{"PET_HOT_SPARES", "lots"}}),
             Catch::StartsWith("PET_HOT_SPARES=lots: not a spare node count"));
  CHECK_THAT(usage_message({"--nnodes=2", "--hot_spares=1", "x"}),
             Catch::StartsWith("--hot_spares 1: hot spares need --rdzv_backend c10d or etcd-v3"));
  CHECK(parse({"--nnodes=2", "--hot_spares=0", "x"}).rdzv.hot_spares == 0);
}

TEST_CASE("the recovery option: --recovery in_place by default, restart as torchrun, PET_RECOVERY, a bad mode named") {
  CHECK(parse({"x"}).recovery_in_place);
  CHECK_FALSE(parse({"--recovery=restart", "x"}).recovery_in_place);
  CHECK(parse({"--recovery", "in_place", "x"}).recovery_in_place);
  CHECK_FALSE(parse({"x"}, {{"PET_RECOVERY", "restart"}}).recovery_in_place);
  CHECK(parse({"--recovery=in_place", "x"}, {{"PET_RECOVERY", "restart"}}).recovery_in_place);  // the command line wins
  CHECK_THAT(usage_message({"--recovery=inplace", "x"}), Catch::Contains("--recovery inplace: not a recovery mode") &&
                                                             Catch::Contains("use in_place") &&
                                                             Catch::Contains("or restart"));
  CHECK_THAT(usage_message({"x"}, {{"PET_RECOVERY", "later"}}), Catch::Contains("PET_RECOVERY=later: not a recovery mode"));
  // The standby process of in-place recovery (process/standby.h): on by default.
  CHECK(parse({"x"}).recovery_standby);
  CHECK_FALSE(parse({"--recovery_standby=off", "x"}).recovery_standby);
  CHECK_FALSE(parse({"x"}, {{"PET_RECOVERY_STANDBY", "off"}}).recovery_standby);
  CHECK_THAT(usage_message({"--recovery_standby=maybe", "x"}),
             Catch::Contains("--recovery_standby maybe: use on (a returning rank starts in a pre-started process) or "
                             "off (it starts afresh)"));
}
