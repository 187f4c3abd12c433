// PyTorch's flight recorder pointed into the run (flight_recorder.h): the
// workers' variables, the parent's kept, and the report's list of dumps
// from a fake directory.
#include "ddp/launcher/diagnose/flight_recorder.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/config/worker_env.h"
#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <utime.h>

using namespace ddp::launcher;

namespace {

EnvMap env_with(const EnvMap& parent, const std::string& prefix) {
  static const LaunchOptions opts = parse_launch_options({"--nproc_per_node", "2", "train.py"}, {});
  GroupSpec g;
  g.opts = &opts;
  g.nproc = 2;
  g.fr_dump_prefix = prefix;
  return worker_environment(parent, g, 1, "/run/x/error.json");
}

}  // namespace

TEST_CASE("every worker gets the flight recorder's dump prefix in the run, unless the parent set one") {
  auto env = env_with({{"PATH", "/bin"}}, "/tmp/ddp-launch-1/attempt_0.nccl_trace_rank_");
  CHECK(env.at("TORCH_FR_DUMP_TEMP_FILE") == "/tmp/ddp-launch-1/attempt_0.nccl_trace_rank_");
  CHECK(env.at("TORCH_NCCL_DUMP_ON_TIMEOUT") == "1");
  // Not the buffer size (2.11's default is torch's recommended 2000, and its
  // old name makes 2.11 warn in every process), nor the old dump name (2.11
  // warns at the dump when both are set).
  CHECK(env.count("TORCH_NCCL_TRACE_BUFFER_SIZE") == 0);
  CHECK(env.count("TORCH_FR_BUFFER_SIZE") == 0);
  CHECK(env.count("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == 0);
  // The parent's values stay, either name of the prefix.
  env = env_with({{"TORCH_FR_DUMP_TEMP_FILE", "/scratch/fr_"}, {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"}}, "/tmp/r/p_");
  CHECK(env.at("TORCH_FR_DUMP_TEMP_FILE") == "/scratch/fr_");
  CHECK(env.at("TORCH_NCCL_DUMP_ON_TIMEOUT") == "0");
  env = env_with({{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/scratch/old_"}}, "/tmp/r/p_");
  CHECK(env.count("TORCH_FR_DUMP_TEMP_FILE") == 0);  // it would win over the parent's older name
  CHECK(env.at("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") == "/scratch/old_");
  CHECK(flight_recorder_prefix({{"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/scratch/old_"}}, "/tmp/r/p_") == "/scratch/old_");
  CHECK(flight_recorder_prefix({{"TORCH_FR_DUMP_TEMP_FILE", "/a_"}, {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/b_"}}, "/c_") == "/a_");
  CHECK(flight_recorder_prefix({}, "/tmp/r/p_") == "/tmp/r/p_");
  // No prefix (none given by the supervisor): nothing set.
  env = env_with({}, "");
  CHECK(env.count("TORCH_FR_DUMP_TEMP_FILE") == 0);
  CHECK(env.count("TORCH_NCCL_DUMP_ON_TIMEOUT") == 0);
}

TEST_CASE("the dumps under a prefix: regular files only, and only those an attempt wrote or changed") {
  ddp::test::ScratchDir d;
  const std::string prefix = d.dir + "/attempt_0.nccl_trace_rank_";
  d.make("attempt_0.nccl_trace_rank_1", "t1", 0644);
  d.make("attempt_0.nccl_trace_rank_0", "t0", 0644);
  d.make("attempt_1.nccl_trace_rank_0", "other attempt", 0644);
  d.make("attempt_0.rank_0.error.json", "{}", 0644);
  ::mkdir((prefix + "9").c_str(), 0755);  // a directory of that name is no dump
  const auto files = list_flight_recorder_files(prefix);
  REQUIRE(files.size() == 2);
  CHECK(files[0].path == prefix + "0");
  CHECK(files[1].path == prefix + "1");
  CHECK(new_dumps({}, files) == std::vector<std::string>{prefix + "0", prefix + "1"});
  // Under a parent's prefix: an older dump that the attempt rewrote counts, one it left does not.
  auto before = files;
  utimbuf older{1000000000, 1000000000};
  ::utime((prefix + "1").c_str(), &older);
  CHECK(new_dumps(before, list_flight_recorder_files(prefix)) == std::vector<std::string>{prefix + "1"});
  CHECK(list_flight_recorder_files(d.dir + "/none/p_").empty());
  CHECK(list_flight_recorder_files("").empty());
}

TEST_CASE("the failure report points at the flight recorder dumps, with the command that reads them") {
  AttemptResult a;
  WorkerExit w;
  w.rank = 1;
  w.code = 1;
  a.exits.push_back(w);
  a.root_cause = w;
  a.fr_prefix = "/tmp/ddp-launch-1/attempt_0.nccl_trace_rank_";
  a.fr_dumps = {a.fr_prefix + "0", a.fr_prefix + "1"};
  CHECK_THAT(format_failure_report({a}, "h", 0),
             Catch::Contains("Flight recorder dumps (each rank's last collectives; read them with `torchfrtrace "
                             "/tmp/ddp-launch-1 --prefix attempt_0.nccl_trace_rank_`):\n"
                             "  /tmp/ddp-launch-1/attempt_0.nccl_trace_rank_0\n"
                             "  /tmp/ddp-launch-1/attempt_0.nccl_trace_rank_1\n"));
  a.fr_dumps.clear();
  CHECK_THAT(format_failure_report({a}, "h", 0), !Catch::Contains("Flight recorder"));
}
