// The flight recorder's dumps end up in the run and in the report
// (flight_recorder.h): a shell worker writes the file torch's watchdog would
// write on a collective's timeout, at the prefix the launcher gave it.
#include "scenario_util.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

using namespace ddp::test;

namespace {

// Each rank writes "<prefix><RANK>" as torch does, then rank 1 fails and
// rank 0 waits for the teardown.
std::string dumping_worker(const TempDir& dir) {
  const std::string path = dir.file("worker.sh");
  write_file(path,
             "#!/bin/sh\n"
             "env > \"$OUT/env.$RANK\"\n"
             "[ -n \"$TORCH_FR_DUMP_TEMP_FILE\" ] && printf 'trace of rank %s' \"$RANK\" > \"$TORCH_FR_DUMP_TEMP_FILE$RANK\"\n"
             ": > \"$OUT/dumped.$RANK\"\n"
             "[ \"$RANK\" = 1 ] && { while [ ! -e \"$OUT/dumped.0\" ]; do sleep 0.01; done; exit 6; }\n"
             "exec sleep 300\n",  // ended by the teardown's SIGTERM (no trap: none can race with it)
             true);
  return path;
}

// The report's lines under "Flight recorder dumps".
std::vector<std::string> listed_dumps(const std::string& output) {
  std::vector<std::string> out;
  const auto at = output.find("Flight recorder dumps");
  if (at == std::string::npos) return out;
  std::istringstream in(output.substr(output.find('\n', at) + 1));
  for (std::string line; std::getline(in, line) && line.rfind("  /", 0) == 0;) out.push_back(line.substr(2));
  return out;
}

}  // namespace

TEST_CASE("flight recorder dumps go to the run directory, the report lists them and the directory is kept") {
  TempDir out, tmp;
  const std::string w = dumping_worker(out);
  auto r = run({launcher(), "--standalone", "--nproc_per_node", "2", "--shutdown_timeout", "2", w}, {{"OUT", out.path()}, {"TMPDIR", tmp.path()}}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 6);
  const auto env = parse_env_dump(read_file(out.file("env.1")));
  REQUIRE(env.count("TORCH_FR_DUMP_TEMP_FILE"));
  CHECK_THAT(env.at("TORCH_FR_DUMP_TEMP_FILE"), Catch::StartsWith(tmp.path() + "/ddp-launch-"));
  CHECK_THAT(env.at("TORCH_FR_DUMP_TEMP_FILE"), Catch::EndsWith("/attempt_0.nccl_trace_rank_"));
  CHECK(env.count("TORCH_NCCL_DUMP_ON_TIMEOUT") == 1);
  const auto dumps = listed_dumps(r.output);
  REQUIRE(dumps.size() == 2);
  CHECK(dumps[0] == env.at("TORCH_FR_DUMP_TEMP_FILE") + "0");
  CHECK(read_file(dumps[1]) == "trace of rank 1");  // still there: the run directory was kept
  CHECK_THAT(r.output, Catch::Contains("torchfrtrace "));
}

TEST_CASE("a flight recorder prefix the user set is kept, and the report lists that attempt's dumps there") {
  TempDir out, tmp;
  write_file(out.file("mine_7"), "an older job's dump");  // not of this run: not listed
  const std::string w = dumping_worker(out);
  auto r = run({launcher(), "--standalone", "--nproc_per_node", "2", "--shutdown_timeout", "2", w},
               {{"OUT", out.path()}, {"TMPDIR", tmp.path()}, {"TORCH_FR_DUMP_TEMP_FILE", out.file("mine_")},
                {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"}},
               60);
  INFO(r.output);
  CHECK(r.exit_code == 6);
  const auto env = parse_env_dump(read_file(out.file("env.1")));
  CHECK(env.at("TORCH_FR_DUMP_TEMP_FILE") == out.file("mine_"));
  CHECK(env.at("TORCH_NCCL_DUMP_ON_TIMEOUT") == "0");
  const auto dumps = listed_dumps(r.output);
  CHECK(dumps == std::vector<std::string>{out.file("mine_0"), out.file("mine_1")});
}
