// app/resolve.h: main's resolution of the command line, in-process.
#include "ddp/launcher/app/resolve.h"
#include "ddp/launcher/config/options.h"

#include "scratch_dir.h"
#include "test_skip.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::launcher;

namespace {

// A plain environment: no Slurm, no PET_*, OMP_NUM_THREADS set.
EnvMap plain_env() { return {{"PATH", "/usr/bin:/bin"}, {"OMP_NUM_THREADS", "1"}}; }

}  // namespace

TEST_CASE("resolve: --help and --version print to out and ask for no run") {
  std::ostringstream out, notes;
  CHECK(!resolve_launch({"--help"}, plain_env(), false, out, notes));
  CHECK_THAT(out.str(), Catch::StartsWith("Usage: ddp-launch [options] PROGRAM [ARGS...]"));
  out.str("");
  CHECK(!resolve_launch({"--version"}, plain_env(), false, out, notes));
  CHECK_THAT(out.str(), Catch::StartsWith("ddp-launch "));
  CHECK(notes.str().empty());
}

TEST_CASE("resolve: a plan with its workers, command and environment, and torchrun's name implies --use_env") {
  std::ostringstream out, notes;
  const auto plan = resolve_launch({"--standalone", "--nproc_per_node=3", "/bin/true", "a"}, plain_env(), true, out, notes);
  REQUIRE(plan);
  CHECK(plan->nproc == 3);
  CHECK(plan->opts.use_env);
  CHECK(plan->command.exe == "/bin/true");
  CHECK(plan->parent_env.at("OMP_NUM_THREADS") == "1");
  CHECK(plan->omp_threads == 0);  // the parent's is kept
  CHECK(plan->run_log_dir.empty());
  CHECK(out.str().empty());
}

TEST_CASE("resolve: without OMP_NUM_THREADS each worker gets a share of the CPUs, and it is said") {
  std::ostringstream out, notes;
  EnvMap env = plain_env();
  env.erase("OMP_NUM_THREADS");
  const auto plan = resolve_launch({"--standalone", "--nproc_per_node=1", "/bin/true"}, env, false, out, notes);
  REQUIRE(plan);
  CHECK(plan->omp_threads >= 1);
  CHECK_THAT(notes.str(), Catch::Contains("OMP_NUM_THREADS is not set; each worker gets OMP_NUM_THREADS=" +
                                          std::to_string(plan->omp_threads)));
  // The count's noun agrees with it: "1 worker", "2 workers".
  CHECK_THAT(notes.str(), Catch::Contains(" / 1 worker). Set it to override."));
  std::ostringstream out2, notes2;
  REQUIRE(resolve_launch({"--standalone", "--nproc_per_node=2", "/bin/true"}, env, false, out2, notes2));
  CHECK_THAT(notes2.str(), Catch::Contains(" / 2 workers). Set it to override."));
}

TEST_CASE("resolve: a --summary_json that could not be written is a usage error now, not after the run") {
  ddp::test::ScratchDir scratch;
  const std::string dir_path = scratch.dir;
  std::ostringstream out, notes;
  CHECK_THROWS_WITH(resolve_launch({"--standalone", "--summary_json", dir_path, "/bin/true"}, plain_env(), false,
                                   out, notes),
                    Catch::Contains("--summary_json " + dir_path + ": '" + dir_path + "' is a directory; give a file path"));
  CHECK_THROWS_WITH(resolve_launch({"--standalone", "--summary_json", dir_path + "/no/such/s.json", "/bin/true"},
                                   plain_env(), false, out, notes),
                    Catch::Contains("cannot write in '" + dir_path + "/no/such'"));
}

TEST_CASE("resolve: --trace_file and --summary_json to one file, named so or through a link, is one error") {
  ddp::test::ScratchDir scratch;
  const std::string dir = scratch.dir;
  std::ostringstream out, notes;
  const std::string same = "--trace_file " + dir + "/run.json and --summary_json ";
  CHECK_THROWS_WITH(resolve_launch({"--standalone", "--trace_file", dir + "/run.json", "--summary_json",
                                    dir + "/./run.json", "/bin/true"}, plain_env(), false, out, notes),
                    same + dir + "/./run.json are the same file (" + dir + "/run.json): one would replace the other "
                    "at the end; give each its own path");
  REQUIRE(::symlink((dir + "/run.json").c_str(), (dir + "/link.json").c_str()) == 0);
  REQUIRE(std::ofstream(dir + "/run.json").good());
  CHECK_THROWS_WITH(resolve_launch({"--standalone", "--trace_file", dir + "/run.json", "--summary_json",
                                    dir + "/link.json", "/bin/true"}, plain_env(), false, out, notes),
                    Catch::Contains("are the same file (" + dir + "/run.json)"));
  // Two files, or a device both may write through, are fine.
  CHECK(resolve_launch({"--standalone", "--trace_file", dir + "/t.json", "--summary_json", dir + "/s.json",
                        "/bin/true"}, plain_env(), false, out, notes));
  CHECK(resolve_launch({"--standalone", "--trace_file", "/dev/null", "--summary_json", "/dev/null", "/bin/true"},
                       plain_env(), false, out, notes));
}

// Issue 51 item 2: root writing through another user's link in /tmp.
TEST_CASE("resolve: a --trace_file that is another user's link in a sticky directory is refused at the start") {
  if (::geteuid() != 0) DDP_SKIP("needs root to give a link another owner (lchown)");
  ddp::test::ScratchDir scratch;
  const std::string sticky = scratch.dir + "/tmp";
  REQUIRE(::mkdir(sticky.c_str(), 01777) == 0);
  REQUIRE(::chmod(sticky.c_str(), 01777) == 0);
  REQUIRE(std::ofstream(scratch.dir + "/secret").good());
  const std::string link = sticky + "/trace.json";
  REQUIRE(::symlink((scratch.dir + "/secret").c_str(), link.c_str()) == 0);
  REQUIRE(::lchown(link.c_str(), 65534, 65534) == 0);
  std::ostringstream out, notes;
  CHECK_THROWS_WITH(resolve_launch({"--standalone", "--trace_file", link, "/bin/true"}, plain_env(), false, out, notes),
                    Catch::StartsWith("--trace_file " + link + ": will not write through '" + link +
                                      "': a symlink in the sticky, world-writable directory") &&
                        Catch::EndsWith("; remove the link or give another path"));
  CHECK(resolve_launch({"--standalone", "--summary_json", "/dev/stdout", "/bin/true"}, plain_env(), false, out, notes));
}

TEST_CASE("resolve: a master address that does not resolve is a usage error naming it") {
  std::ostringstream out, notes;
  CHECK_THROWS_AS(resolve_launch({"--nnodes=2", "--node_rank=1", "--master_addr=no-such-host.invalid",
                                  "--master_port=29999", "/bin/true"},
                                 plain_env(), false, out, notes),
                  UsageError);
  try {
    resolve_launch({"--nnodes=2", "--node_rank=1", "--master_addr=no-such-host.invalid", "--master_port=29999",
                    "/bin/true"},
                   plain_env(), false, out, notes);
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("no-such-host.invalid") && Catch::Contains("does not resolve"));
  }
}

// Issue 51 item 4: the c10d store client waited its whole join_timeout (600 s)
// on a name that does not exist, then blamed the port.
TEST_CASE("resolve: a c10d endpoint that does not resolve is a usage error naming it, at once") {
  std::ostringstream out, notes;
  CHECK_THROWS_WITH(resolve_launch({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=no-such-host.invalid:29400",
                                    "/bin/true"},
                                   plain_env(), false, out, notes),
                    Catch::StartsWith("--rdzv_endpoint no-such-host.invalid: the host does not resolve (") &&
                        Catch::EndsWith("); give the node that hosts the rendezvous as an IP address or a name this "
                                        "machine resolves (check the spelling, DNS, /etc/hosts)"));
  CHECK(resolve_launch({"--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:29400", "/bin/true"},
                       plain_env(), false, out, notes));
}

TEST_CASE("resolve: --python_heartbeat with python -I says at the start that no heartbeat will come") {
  std::ostringstream out, notes;
  const auto plan = resolve_launch({"--standalone", "--python_heartbeat", "--no_python", "/usr/bin/python3", "-I",
                                    "train.py"}, plain_env(), false, out, notes);
  if (!plan) FAIL("no plan");
  CHECK_THAT(notes.str(), Catch::Contains("ddp-launch: warning: --python_heartbeat: the workers' python runs with -I"));
  std::ostringstream out2, notes2;
  REQUIRE(resolve_launch({"--standalone", "--python_heartbeat", "--no_python", "/usr/bin/python3", "train.py"},
                         plain_env(), false, out2, notes2));
  CHECK_THAT(notes2.str(), !Catch::Contains("--python_heartbeat:"));
}
