#include "ddp/launcher/options.h"

#include <catch2/catch.hpp>

using namespace ddp::launcher;

namespace {
LaunchOptions parse(std::vector<std::string> args, EnvMap env = {}) { return parse_launch_options(args, env); }

std::string usage_message(std::vector<std::string> args, EnvMap env = {}) {
  try {
    parse_launch_options(args, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}
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
      {{"--nnodes=1:4", "x"}, "--nnodes 1:4: elastic node ranges are not supported yet; give a fixed node count such as --nnodes 4"},
      {{"--nnodes=2", "--node_rank=2", "x"}, "--node_rank 2 must be below --nnodes 2"},
      {{"--node_rank=-1", "x"}, "--node_rank: -1"},
      {{"--master_port=0", "x"}, "--master_port: 0 is out of range"},
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

TEST_CASE("torchrun options ddp-launch lacks: not supported yet, and what to use instead") {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--rdzv_backend", "c10d", "x"}, "--rdzv_backend c10d: not supported yet; elastic rendezvous"},
      {{"--rdzv-backend=etcd", "x"}, "--rdzv-backend etcd: not supported yet"},
      {{"--rdzv-endpoint", "h:29400", "x"}, "--rdzv-endpoint h:29400: not supported yet; give rank 0's node as --master_addr"},
      {{"--nnodes", "1:2", "x"}, "--nnodes 1:2: elastic node ranges are not supported yet"},
      {{"--run-path", "x"}, "--run-path: not supported yet; give the script itself as PROGRAM"},
      {{"--monitor-interval", "1", "x"}, "--monitor-interval 1: not supported yet"},
  };
  for (const auto& c : cases) {
    INFO("args: " << Catch::Detail::stringify(c.args));
    CHECK_THAT(usage_message(c.args), Catch::StartsWith(c.expect));
  }
  // Their defaults change nothing in torchrun either: accepted.
  CHECK(parse({"--rdzv_backend=static", "--tee", "0", "-r", "0", "--start_method=spawn", "x"}).program == "x");
  CHECK(parse({"--tee", "0", "train.py", "--tee", "3"}).program_args == std::vector<std::string>{"--tee", "3"});
}

TEST_CASE("PET_ variables of unsupported options are errors too, never ignored") {
  CHECK_THAT(usage_message({"x"}, {{"PET_RDZV_BACKEND", "c10d"}}), Catch::StartsWith("PET_RDZV_BACKEND=c10d: not supported yet"));
  CHECK_THAT(usage_message({"x"}, {{"PET_RDZV_ENDPOINT", "h:1"}}), Catch::StartsWith("PET_RDZV_ENDPOINT=h:1: not supported yet"));
  CHECK_THAT(usage_message({"x"}, {{"PET_LOCAL_ADDR", "n1"}}), Catch::StartsWith("PET_LOCAL_ADDR=n1: not supported yet"));
  CHECK_THAT(usage_message({"x"}, {{"PET_RUN_PATH", "1"}}), Catch::StartsWith("PET_RUN_PATH=1: not supported yet"));
  CHECK(parse({"x"}, {{"PET_RDZV_BACKEND", "static"}, {"PET_START_METHOD", "spawn"}}).program == "x");
}

TEST_CASE("help text names PYTHON_EXEC, the PET_ variables and the unsupported options") {
  CHECK_THAT(usage_text(), Catch::Contains("PYTHON_EXEC") && Catch::Contains("PET_") &&
                               Catch::Contains("not supported yet") && Catch::Contains("--rdzv_backend") &&
                               Catch::Contains("stdin goes to local rank 0"));
}
