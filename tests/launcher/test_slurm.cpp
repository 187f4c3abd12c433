// Slurm without Slurm: hostlist and tasks-per-node expansion, and what
// resolve_slurm makes of SLURM_* maps (per node, per rank, precedence, errors).
#include "ddp/launcher/config/slurm.h"
#include "ddp/launcher/config/worker_env.h"

#include <catch2/catch.hpp>

using namespace ddp::launcher;
using Hosts = std::vector<std::string>;

namespace {

// What main does before the group starts: parse, nproc, command, Slurm.
LaunchPlan resolved(const std::vector<std::string>& args, const EnvMap& env, HostCounts host = {2, 0}) {
  LaunchPlan cfg;
  cfg.opts = parse_launch_options(args, env);
  cfg.nproc = resolve_nproc(cfg.opts.nproc_spec, host);
  cfg.command = resolve_command(cfg.opts, {{"PATH", "/usr/bin:/bin"}});
  resolve_slurm(cfg, env);
  return cfg;
}

// A two-node allocation as sbatch -N2 sets it (the batch script's view).
EnvMap allocation() {
  return {{"SLURM_JOB_ID", "4711"},          {"SLURM_NNODES", "2"},          {"SLURM_NODEID", "1"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_TASKS_PER_NODE", "1(x2)"}, {"SLURM_NTASKS", "2"},
          {"SLURM_PROCID", "0"},             {"SLURM_LOCALID", "0"}};
}

// One srun task of `srun -N2 --ntasks-per-node=2` (4 ranks).
EnvMap srun_task(int procid) {
  EnvMap env = allocation();
  env["SLURM_STEP_ID"] = "0";
  env["SLURM_NTASKS"] = "4";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  env["SLURM_PROCID"] = std::to_string(procid);
  env["SLURM_LOCALID"] = std::to_string(procid % 2);
  env["SLURM_NODEID"] = std::to_string(procid / 2);
  return env;
}

}  // namespace

TEST_CASE("hostlists expand like Slurm's, zero padding kept") {
  CHECK(expand_hostlist("vm", "V") == Hosts{"vm"});
  CHECK(expand_hostlist("gpu-a[08-10,012],cpu1", "V") == Hosts{"gpu-a08", "gpu-a09", "gpu-a10", "gpu-a012", "cpu1"});
  CHECK(expand_hostlist("n[1-3]-ib", "V") == Hosts{"n1-ib", "n2-ib", "n3-ib"});
  CHECK(expand_hostlist("a[9-11],b[1,3],c", "V") == Hosts{"a9", "a10", "a11", "b1", "b3", "c"});
  CHECK(expand_hostlist("n[098-100]", "V") == Hosts{"n098", "n099", "n100"});
  CHECK(expand_hostlist("r[1-2]n[01-02]", "V") == Hosts{"r1n01", "r1n02", "r2n01", "r2n02"});
  CHECK(expand_hostlist("10.0.0.[1-2]", "V") == Hosts{"10.0.0.1", "10.0.0.2"});
}

TEST_CASE("malformed hostlists are one line naming the variable and value") {
  for (const std::string bad : {"", "a,,b", "a,", "n[1-3", "n1-3]", "n[]", "n[3-1]", "n[a-b]", "n[1-2-3]", "n[[1]]",
                                "a b", "n[1,]"}) {
    INFO(bad);
    CHECK_THROWS_WITH(expand_hostlist(bad, "SLURM_JOB_NODELIST"), Catch::StartsWith("SLURM_JOB_NODELIST=" + bad + ":"));
  }
  CHECK_THROWS_WITH(expand_hostlist("n[1-2000000]", "V"), Catch::Contains("more than"));
  CHECK_THROWS_WITH(expand_hostlist("a[1-4]b[1-4]", "V", 10), Catch::Contains("more than 10"));
  CHECK_THROWS_WITH(expand_hostlist("a,b,c", "V", 2), Catch::Contains("more than 2"));
}

TEST_CASE("tasks per node expand N(xM)") {
  CHECK(expand_tasks_per_node("2(x3),1", "T") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4", "T") == std::vector<int>{4});
  for (const std::string bad : {"", "x", "2(x)", "2(x3", "0", "2,,1", "-1", "2(y3)"}) {
    INFO(bad);
    CHECK_THROWS_WITH(expand_tasks_per_node(bad, "SLURM_TASKS_PER_NODE"),
                      Catch::StartsWith("SLURM_TASKS_PER_NODE=" + bad + ":"));
  }
}

TEST_CASE("the master port comes from the job id, below the ephemeral range") {
  CHECK(slurm_master_port(4711) == 14711);
  CHECK(slurm_master_port(20000) == 10000);
  CHECK(slurm_master_port(123456789) != slurm_master_port(123456790));
  for (long long id : {0LL, 19999LL, 1LL << 40}) {
    CHECK(slurm_master_port(id) >= 10000);
    CHECK(slurm_master_port(id) < 32768);
  }
}

TEST_CASE("outside an allocation nothing changes") {
  EnvMap env = {{"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}};  // no SLURM_JOB_ID
  auto cfg = resolved({"--no_python", "/bin/true"}, env);
  CHECK(cfg.opts.nnodes == 1);
  CHECK(cfg.opts.node_rank == 0);
  CHECK(cfg.opts.master_addr == "127.0.0.1");
  CHECK(cfg.opts.master_port == 29500);
  CHECK_FALSE(cfg.opts.task);
  CHECK_THROWS_WITH(resolved({"--slurm_tasks", "--no_python", "/bin/true"}, env), Catch::Contains("SLURM_JOB_ID"));
}

TEST_CASE("inside an allocation: nodes, node rank, first host and job port") {
  auto cfg = resolved({"--nproc_per_node", "2", "--no_python", "/bin/true"}, allocation());
  CHECK(cfg.opts.nnodes == 2);
  CHECK(cfg.opts.node_rank == 1);
  CHECK(cfg.opts.master_addr == "gpu07");
  CHECK(cfg.opts.master_port == 14711);
  CHECK(cfg.nproc == 2);
  CHECK_FALSE(cfg.opts.task);

  EnvMap env = allocation();
  env["MASTER_PORT"] = "23456";
  env["MASTER_ADDR"] = "head";
  env["SLURM_STEP_NODELIST"] = "gpu[08]";  // inside srun the step's list is used
  cfg = resolved({"--no_python", "/bin/true"}, env);
  CHECK(cfg.opts.master_port == 23456);
  CHECK(cfg.opts.master_addr == "head");
  env.erase("MASTER_ADDR");
  CHECK(resolved({"--no_python", "/bin/true"}, env).opts.master_addr == "gpu08");
}

TEST_CASE("explicit options and PET_* win over Slurm's values") {
  auto cfg = resolved({"--nnodes", "3", "--node_rank=2", "--master_addr", "h0", "--master_port", "1234", "--no_python",
                       "/bin/true"},
                      allocation());
  CHECK(cfg.opts.nnodes == 3);
  CHECK(cfg.opts.node_rank == 2);
  CHECK(cfg.opts.master_addr == "h0");
  CHECK(cfg.opts.master_port == 1234);

  EnvMap env = allocation();
  env["PET_NNODES"] = "1";
  env["PET_NODE_RANK"] = "0";
  env["PET_MASTER_PORT"] = "4321";
  env["MASTER_PORT"] = "999";
  env["SLURM_NNODES"] = "garbage";  // not used, so not an error
  cfg = resolved({"--no_python", "/bin/true"}, env);
  CHECK(cfg.opts.nnodes == 1);
  CHECK(cfg.opts.node_rank == 0);
  CHECK(cfg.opts.master_port == 4321);
  CHECK(cfg.opts.master_addr == "gpu07");

  // --standalone keeps its one-node meaning inside an allocation.
  cfg = resolved({"--standalone", "--no_python", "/bin/true"}, allocation());
  CHECK(cfg.opts.nnodes == 1);
  CHECK(cfg.opts.master_port == 0);
}

TEST_CASE("malformed SLURM_* values name the variable and value") {
  auto fails = [](const char* var, const char* value, const std::string& expected) {
    EnvMap env = allocation();
    env[var] = value;
    CHECK_THROWS_WITH(resolved({"--no_python", "/bin/true"}, env), Catch::StartsWith(expected));
  };
  fails("SLURM_NNODES", "two", "SLURM_NNODES=two: not an integer");
  fails("SLURM_NNODES", "0", "SLURM_NNODES=0: not an integer from 1");
  fails("SLURM_NODEID", "-1", "SLURM_NODEID=-1: not an integer");
  fails("SLURM_NODEID", "5", "node rank 5 (SLURM_NODEID) must be below the node count 2 (SLURM_NNODES)");
  fails("SLURM_JOB_NODELIST", "gpu[07-", "SLURM_JOB_NODELIST=gpu[07-: unbalanced brackets");
  fails("SLURM_JOB_ID", "12ab", "SLURM_JOB_ID=12ab: not a job id");
  fails("MASTER_PORT", "70000", "MASTER_PORT=70000: not a port");
  EnvMap env = allocation();
  env.erase("SLURM_JOB_NODELIST");
  CHECK_THROWS_WITH(resolved({"--no_python", "/bin/true"}, env), Catch::Contains("SLURM_JOB_NODELIST is not set"));
}

TEST_CASE("nproc_per_node auto and gpu count Slurm's GPUs on the node") {
  EnvMap env = allocation();
  env["SLURM_GPUS_ON_NODE"] = "4";
  CHECK(probe_host_with_slurm(true, env).gpus == 4);
  CHECK(resolve_nproc("auto", probe_host_with_slurm(true, env)) == 4);
  env["CUDA_VISIBLE_DEVICES"] = "2,3";  // this process may use only two of them
  CHECK(probe_host_with_slurm(true, env).gpus == 2);
  env.erase("SLURM_GPUS_ON_NODE");
  env["CUDA_VISIBLE_DEVICES"] = "GPU-aaaa,GPU-bbbb,GPU-cccc";
  CHECK(probe_host_with_slurm(true, env).gpus == 3);
  env["CUDA_VISIBLE_DEVICES"] = "";
  CHECK(probe_host_with_slurm(true, env).gpus == 0);
  CHECK_THROWS_WITH(resolve_nproc("gpu", probe_host_with_slurm(true, env)), Catch::Contains("no NVIDIA GPU"));
  env["SLURM_GPUS_ON_NODE"] = "four";
  CHECK_THROWS_WITH(probe_host_with_slurm(true, env), Catch::StartsWith("SLURM_GPUS_ON_NODE=four: not a GPU count"));
}

TEST_CASE("srun per rank (--slurm_tasks): every srun task is one rank") {
  for (const char* spelling : {"--slurm_tasks", "--slurm-tasks"}) {
    auto cfg = resolved({spelling, "--use_env", "--no_python", "/bin/true"}, srun_task(3));
    REQUIRE(cfg.opts.task);
    CHECK(cfg.nproc == 1);
    GroupSpec g;
    g.opts = &cfg.opts;
    g.nproc = cfg.nproc;
    g.master_port = cfg.opts.master_port;
    const EnvMap w = worker_environment({}, g, 0, "/tmp/e.json");
    CHECK(w.at("RANK") == "3");
    CHECK(w.at("LOCAL_RANK") == "1");
    CHECK(w.at("WORLD_SIZE") == "4");
    CHECK(w.at("LOCAL_WORLD_SIZE") == "2");
    CHECK(w.at("GROUP_RANK") == "1");
    CHECK(w.at("GROUP_WORLD_SIZE") == "2");
    CHECK(w.at("ROLE_RANK") == "3");
    CHECK(w.at("MASTER_ADDR") == "gpu07");
    CHECK(w.at("MASTER_PORT") == "14711");
  }
  EnvMap env = srun_task(0);
  env["PET_SLURM_TASKS"] = "1";
  CHECK(resolved({"--use_env", "--no_python", "/bin/true"}, env).opts.task);
}

TEST_CASE("srun per rank without --use_env passes srun's local id as --local_rank") {
  auto cfg = resolved({"--slurm_tasks", "--no_python", "/bin/echo", "a"}, srun_task(3));
  CHECK(cfg.command.argv_for(0) == std::vector<std::string>{"--local_rank=1", "a"});
}

TEST_CASE("per-rank mode is found when srun started one task per rank") {
  // 2 nodes x --nproc_per_node 2 = 4 = SLURM_NTASKS inside an srun step.
  CHECK(resolved({"--nproc_per_node=2", "--no_python", "/bin/true"}, srun_task(2)).opts.task);
  // The batch script itself (no SLURM_STEP_ID) is one process, whatever SLURM_NTASKS says.
  EnvMap batch = srun_task(0);
  batch.erase("SLURM_STEP_ID");
  batch["SLURM_NNODES"] = "1";
  batch["SLURM_JOB_NODELIST"] = "gpu07";
  batch["SLURM_STEP_TASKS_PER_NODE"] = "4";
  batch["SLURM_TASKS_PER_NODE"] = "4";
  batch["SLURM_NODEID"] = "0";
  auto cfg = resolved({"--nproc_per_node=4", "--no_python", "/bin/true"}, batch);
  CHECK_FALSE(cfg.opts.task);
  CHECK(cfg.nproc == 4);
  CHECK_THROWS_WITH(resolved({"--slurm_tasks", "--no_python", "/bin/true"}, batch), Catch::Contains("SLURM_STEP_ID"));
  // srun -n1 ddp-launch --nproc_per_node=4: one launcher, four workers.
  EnvMap one = batch;
  one["SLURM_STEP_ID"] = "0";
  one["SLURM_NTASKS"] = "1";
  one["SLURM_STEP_TASKS_PER_NODE"] = "1";
  cfg = resolved({"--nproc_per_node=4", "--no_python", "/bin/true"}, one);
  CHECK_FALSE(cfg.opts.task);
  CHECK(cfg.nproc == 4);
  // srun -N2 --ntasks-per-node=1 ddp-launch --nproc_per_node=4: per node.
  EnvMap per_node = srun_task(0);
  per_node["SLURM_NTASKS"] = "2";
  per_node["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  cfg = resolved({"--nproc_per_node=4", "--no_python", "/bin/true"}, per_node);
  CHECK_FALSE(cfg.opts.task);
  CHECK(cfg.nproc == 4);
  CHECK(cfg.opts.nnodes == 2);
}

TEST_CASE("c10d inside an allocation: Slurm gives only the node count, the rendezvous the rest") {
  const std::vector<std::string> c10d = {"--rdzv_backend=c10d", "--rdzv_endpoint=gpu07:29400", "--nproc_per_node=2",
                                         "--no_python", "/bin/true"};
  auto cfg = resolved(c10d, srun_task(2));
  CHECK_FALSE(cfg.opts.task);  // 2 nodes x 2 = SLURM_NTASKS, but the rendezvous assigns ranks
  CHECK(cfg.opts.rdzv.min_nodes == 2);
  CHECK(cfg.opts.rdzv.max_nodes == 2);
  CHECK(cfg.opts.node_rank == 0);
  std::vector<std::string> range = c10d;
  range.insert(range.begin(), "--nnodes=1:2");
  cfg = resolved(range, allocation());
  CHECK(cfg.opts.rdzv.min_nodes == 1);
  CHECK(cfg.opts.rdzv.max_nodes == 2);
  std::vector<std::string> tasks = c10d;
  tasks.insert(tasks.begin(), "--slurm_tasks");
  CHECK_THROWS_WITH(resolved(tasks, srun_task(0)), Catch::StartsWith("--slurm_tasks takes every rank from srun"));
}

TEST_CASE("several per-node launchers on one node, or contradicting options, are errors") {
  // With --nnodes given, the check still reads srun's own layout.
  CHECK_THROWS_WITH(resolved({"--nnodes=3", "--no_python", "/bin/true"}, srun_task(0)),
                    Catch::StartsWith("srun started 2 tasks on this node"));
  // srun -N2 --ntasks-per-node=2 ddp-launch --nproc_per_node=4: ranks would collide.
  CHECK_THROWS_WITH(resolved({"--nproc_per_node=4", "--no_python", "/bin/true"}, srun_task(0)),
                    Catch::StartsWith("srun started 2 tasks on this node") && Catch::Contains("--slurm_tasks"));
  CHECK_THROWS_WITH(resolved({"--slurm_tasks", "--nproc_per_node=4", "--no_python", "/bin/true"}, srun_task(0)),
                    Catch::StartsWith("--nproc_per_node 4 with --slurm_tasks"));
  CHECK_THROWS_WITH(resolved({"--slurm_tasks", "--nnodes=3", "--no_python", "/bin/true"}, srun_task(0)),
                    Catch::StartsWith("--nnodes 3 with --slurm_tasks"));
  EnvMap env = srun_task(1);
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x3";
  CHECK_THROWS_WITH(resolved({"--slurm_tasks", "--no_python", "/bin/true"}, env),
                    Catch::StartsWith("SLURM_STEP_TASKS_PER_NODE=2(x3:"));
  env = srun_task(1);
  env["SLURM_LOCALID"] = "x";
  CHECK_THROWS_WITH(resolved({"--slurm_tasks", "--no_python", "/bin/true"}, env),
                    Catch::StartsWith("SLURM_LOCALID=x: not an integer"));
}

TEST_CASE("a free port (--master_port 0, an endpoint's port 0) in a Slurm allocation of two nodes is refused") {
  for (auto args : {std::vector<std::string>{"--master_port=0", "--no_python", "/bin/true"},
                    std::vector<std::string>{"--rdzv_endpoint=gpu07:0", "--no_python", "/bin/true"}}) {
    INFO("args: " << Catch::Detail::stringify(args));
    CHECK_THROWS_WITH(resolved(args, allocation()),
                      Catch::Contains(": port 0 (a free port) works for a one-node job only, and this job has 2 nodes"));
  }
  EnvMap one = allocation();
  one["SLURM_NNODES"] = "1";
  one["SLURM_NODEID"] = "0";
  one["SLURM_JOB_NODELIST"] = "gpu07";
  one["SLURM_TASKS_PER_NODE"] = "1";
  one["SLURM_NTASKS"] = "1";
  CHECK(resolved({"--master_port=0", "--no_python", "/bin/true"}, one).opts.master_port == 0);
}
