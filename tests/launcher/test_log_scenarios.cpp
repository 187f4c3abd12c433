// Black-box scenarios for the launcher's logs, run summary and torchrun
// name: the real ddp-launch with scripts/worker.sh. Every wait is on a
// condition with a deadline.
#include "test_skip.h"
#include "scenario_util.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

const std::string& kWorker = scenario_worker();

std::string port_arg() { return "--master_port=" + std::to_string(free_port()); }

int mode_of(const fs::path& p) {
  struct stat st;
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// The one <run_id>_XXXXXX directory under a --log_dir.
fs::path run_dir_in(const fs::path& log_dir, const std::string& run_id) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(log_dir)) found.push_back(e.path());
  REQUIRE(found.size() == 1);
  const std::string name = found[0].filename();
  CHECK(name.rfind(run_id + "_", 0) == 0);
  CHECK(name.size() == run_id.size() + 7);
  return found[0];
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// What scenario "logs" writes, per local rank and stream.
std::string logs_stdout(int rank) {
  return "out " + std::to_string(rank) + "\n" + std::string(200000, static_cast<char>('0' + rank)) + "\n" +
         "bin\001\377\033[0m\n" + "tail " + std::to_string(rank);
}
std::string logs_stderr(int rank) { return "err " + std::to_string(rank) + "\n"; }

}  // namespace

TEST_CASE("tee 3 with --log-dir: whole prefixed lines on the console, the exact bytes in torchrun's layout", "[tsan]") {
  TempDir out, logs;
  auto r = run({launcher(), "--nproc_per_node=2", port_arg(), "--rdzv_id=job7", "--tee", "3", "--log-dir",
                logs.file("base"), kWorker},
               scenario_env(out, "logs"), 60);
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  const fs::path rdir = run_dir_in(logs.file("base"), "job7");
  CHECK(mode_of(logs.file("base")) == 0700);
  CHECK(mode_of(rdir) == 0700);
  CHECK(mode_of(rdir / "attempt_0") == 0700);
  std::set<std::string> expected;  // every console line a worker may produce
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path dir = rdir / "attempt_0" / std::to_string(rank);
    CHECK(mode_of(dir) == 0700);
    CHECK(mode_of(dir / "stdout.log") == 0600);
    CHECK(mode_of(dir / "stderr.log") == 0600);
    CHECK(read_file(dir / "stdout.log") == logs_stdout(rank));
    CHECK(read_file(dir / "stderr.log") == logs_stderr(rank));
    const std::string prefix = "[default" + std::to_string(rank) + "]:";
    for (const std::string& l : lines_of(logs_stdout(rank) + "\n" + logs_stderr(rank))) {
      expected.insert(prefix + l);
      CHECK_THAT(r.output, Catch::Contains(prefix + l + "\n"));
    }
  }
  // No line of one rank has anything of another's inside it.
  for (const std::string& l : lines_of(r.output))
    if (l.rfind("[default", 0) == 0) CHECK(expected.count(l) == 1);
  CHECK_THAT(r.output, Catch::Contains("worker logs and error files in " + rdir.string()));
}

TEST_CASE("duplicate_stdout_filters: matching tee'd lines of every rank, prefixed, in attempt_0/filtered_stdout.log", "[tsan]") {
  TempDir out, logs;
  auto r = run({launcher(), "--nproc_per_node=2", port_arg(), "--rdzv_id=dup", "--tee", "3", "--log-dir",
                logs.file("base"), "--duplicate-stdout-filters", "out ,tail,,", "--duplicate_stderr_filters=err 1",
                kWorker},
               scenario_env(out, "logs"), 60);
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  const fs::path attempt = run_dir_in(logs.file("base"), "dup") / "attempt_0";
  const std::string filtered = read_file(attempt / "filtered_stdout.log");
  // "tail,," is the one filter "tail,", which no line has; the last lines ("tail N", no newline) end with the stream.
  std::vector<std::string> got = lines_of(filtered);
  std::sort(got.begin(), got.end());
  CHECK(got == std::vector<std::string>{"[default0]:out 0", "[default1]:out 1"});
  CHECK(read_file(attempt / "filtered_stderr.log") == "[default1]:err 1\n");
  CHECK(mode_of(attempt / "filtered_stdout.log") == 0600);
  // The per-rank files and the console are as without the filters.
  CHECK(read_file(attempt / "0" / "stdout.log") == logs_stdout(0));
  CHECK_THAT(r.output, Catch::Contains("[default1]:tail 1\n"));
}

TEST_CASE("duplicate_stdout_filters without --tee: a warning, no file, the job runs", "[tsan]") {
  TempDir out, logs;
  auto r = run({launcher(), "--nproc_per_node=1", port_arg(), "--redirects=3", "--log_dir", logs.file("base"),
                "--duplicate_stdout_filters=out", kWorker},
               scenario_env(out, "logs"), 60);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: --duplicate_stdout_filters copies tee'd stdout lines, but no rank's "
                                       "stdout is tee'd to the console"));
  CHECK_FALSE(fs::exists(run_dir_in(logs.file("base"), "none") / "attempt_0" / "filtered_stdout.log"));
}

TEST_CASE("event_log_handler console: torchrun's START, FAILED/TERMINATED and agent events, and null prints none") {
  TempDir out;
  auto r = run({launcher(), "--nproc_per_node=3", port_arg(), "--event-log-handler", "console", "--rdzv_id=ev", kWorker},
               scenario_env(out, "fail", {{"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}}), 60);
  INFO(r.output.substr(0, 4000));
  CHECK(r.exit_code == 3);
  std::vector<std::string> events;
  for (const std::string& l : lines_of(r.output))
    if (l.rfind("{\"name\": \"torchelastic.worker.status.", 0) == 0) events.push_back(l);
  REQUIRE(events.size() == 7);  // 3 START, 3 at the end, the agent's
  for (int rank = 0; rank < 3; ++rank) {
    const std::string pid = std::to_string(std::stoi(read_file(out.file("pid." + std::to_string(rank)))));
    CHECK_THAT(events[rank], Catch::StartsWith("{\"name\": \"torchelastic.worker.status.START\", \"source\": \"WORKER\""));
    CHECK_THAT(events[rank], Catch::Contains("\"run_id\": \"ev\", \"global_rank\": " + std::to_string(rank) +
                                             ", \"group_rank\": 0, \"worker_id\": \"" + pid + "\""));
  }
  // Rank 1 failed with 3; the others were stopped by SIGTERM (the worker's trap exits 143).
  CHECK_THAT(events[4], Catch::Contains("torchelastic.worker.status.FAILED") &&
                            Catch::Contains("\\\"exit_code\\\": [3], \\\"worker_pid\\\": [" +
                                            std::to_string(std::stoi(read_file(out.file("pid.1")))) + "]"));
  CHECK_THAT(events[3], Catch::Contains("\\\"exit_code\\\": [143]"));
  CHECK_THAT(events[6], Catch::StartsWith("{\"name\": \"torchelastic.worker.status.SUCCEEDED\", \"source\": \"AGENT\""));

  TempDir out2;
  auto quiet = run({launcher(), "--nproc_per_node=1", port_arg(), kWorker}, scenario_env(out2, "restart"), 60);
  CHECK(quiet.exit_code == 0);
  CHECK_THAT(quiet.output, !Catch::Contains("torchelastic.worker.status"));
}

TEST_CASE("redirects write the files only, and --local_ranks_filter hides the other ranks on the console") {
  TempDir out, logs;
  // stdout to the files; stderr on the console for rank 0 only (rank 1's goes nowhere, as in torchrun).
  auto r = run({launcher(), "--nproc_per_node=2", port_arg(), "-r", "1", "--local-ranks-filter", "0", "--log_dir",
                logs.path(), kWorker},
               scenario_env(out, "logs"), 60);
  INFO(r.output.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  const fs::path rdir = run_dir_in(logs.path(), "none");
  CHECK_THAT(r.output, Catch::Contains("err 0\n") && !Catch::Contains("err 1") && !Catch::Contains("out 0") &&
                           !Catch::Contains("[default"));
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path dir = rdir / "attempt_0" / std::to_string(rank);
    CHECK(read_file(dir / "stdout.log") == logs_stdout(rank));
    CHECK_FALSE(fs::exists(dir / "stderr.log"));
  }

  // Tee'd, but only rank 1 shown: rank 0's lines are in its files only. The
  // prefix from torchrun's variable; PET_ variables configure the rest.
  TempDir out2, logs2;
  auto t = run({launcher(), "--nproc_per_node=2", port_arg(), kWorker},
               scenario_env(out2, "logs",
                            {{"PET_TEE", "0:3,1:3"}, {"PET_LOCAL_RANKS_FILTER", "1"}, {"PET_LOG_DIR", logs2.path()},
                             {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "<${role_name}|${rank}>"}}),
               60);
  INFO(t.output.substr(0, 2000));
  REQUIRE(t.exit_code == 0);
  CHECK_THAT(t.output, Catch::Contains("<default|1>err 1\n") && Catch::Contains("<default|1>tail 1\n") &&
                           !Catch::Contains("<default|0>") && !Catch::Contains("err 0"));
  const fs::path run2 = run_dir_in(logs2.path(), "none");
  CHECK(read_file(run2 / "attempt_0" / "0" / "stderr.log") == logs_stderr(0));
  CHECK(read_file(run2 / "attempt_0" / "1" / "stdout.log") == logs_stdout(1));
}

TEST_CASE("local_ranks_filter without --tee shows only those ranks' stdout and stderr, as torchrun 2.11") {
  // torchrun 2.11 with --nproc-per-node 2 --no-python sh -c 'echo out rank $RANK; echo err rank $RANK >&2':
  // --local-ranks-filter 1 prints "out rank 1" on stdout and "err rank 1" on stderr, nothing of rank 0;
  // with --tee 1 stdout is "[default1]:out rank 1" and stderr still only "err rank 1".
  struct Case {
    std::vector<std::string> options;
    std::map<std::string, std::string> env;
    std::string out;
  };
  const std::vector<Case> cases = {
      {{"--local-ranks-filter", "1", "--no-python"}, {}, "out rank 1\n"},
      {{"--local_ranks_filter=1", "--no_python"}, {}, "out rank 1\n"},
      {{"--no_python"}, {{"PET_LOCAL_RANKS_FILTER", "1"}}, "out rank 1\n"},
      {{"--local_ranks_filter", "1", "--tee", "1", "--no_python"}, {}, "[default1]:out rank 1\n"},
  };
  for (const Case& c : cases) {
    INFO("options: " << Catch::Detail::stringify(c.options));
    TempDir dir;
    std::vector<std::string> argv = {"/bin/sh", "-c", "out=$1; err=$2; shift 2; exec \"$@\" >\"$out\" 2>\"$err\"", "sh",
                                     dir.file("stdout"), dir.file("stderr"), launcher(), "--nproc_per_node=2",
                                     "--use_env", port_arg()};
    argv.insert(argv.end(), c.options.begin(), c.options.end());
    for (const std::string a : {"/bin/sh", "-c", "echo out rank $RANK; echo err rank $RANK >&2"}) argv.push_back(a);
    auto r = run(argv, c.env, 60);
    const std::string out = read_file(dir.file("stdout")), err = read_file(dir.file("stderr"));
    INFO("stdout:\n" << out << "\nstderr:\n" << err);
    REQUIRE(r.exit_code == 0);
    CHECK(out == c.out);
    CHECK_THAT(err, Catch::Contains("err rank 1\n") && !Catch::Contains("rank 0"));
  }
}

TEST_CASE("with --log_dir, error files live there and a restart goes to attempt_1") {
  TempDir out, logs;
  auto env = run({launcher(), "--nproc_per_node=2", port_arg(), "--log_dir", logs.path(), kWorker},
                 scenario_env(out, "env"), 60);
  REQUIRE(env.exit_code == 0);
  const fs::path rdir = run_dir_in(logs.path(), "none");
  for (int rank = 0; rank < 2; ++rank)
    CHECK(parse_env_dump(read_file(out.file("env." + std::to_string(rank))))["TORCHELASTIC_ERROR_FILE"] ==
          (rdir / "attempt_0" / std::to_string(rank) / "error.json").string());

  TempDir out2, logs2;
  auto r = run({launcher(), "--nproc_per_node=2", "--max_restarts=1", port_arg(), "-t", "3", kWorker},
               scenario_env(out2, "restart", {{"PET_LOG_DIR", logs2.path()}}), 60);
  REQUIRE(r.exit_code == 0);
  const fs::path run2 = run_dir_in(logs2.path(), "none");
  for (const char* d : {"attempt_0/0", "attempt_0/1", "attempt_1/0", "attempt_1/1"}) {
    INFO(d);
    CHECK(fs::is_directory(run2 / d));
    CHECK(fs::exists(run2 / d / "stdout.log"));
  }
}

TEST_CASE("the failure report points at the failing rank's log files and its error file") {
  TempDir out, logs;
  auto r = run({launcher(), "--nproc_per_node=2", port_arg(), "--redirects=3", "--log_dir", logs.path(), kWorker},
               scenario_env(out, "logs", {{"FAIL_RANK", "1"}}), 60);
  INFO(r.output);
  CHECK(r.exit_code == 3);
  const fs::path dir = run_dir_in(logs.path(), "none") / "attempt_0" / "1";
  CHECK(report_value(r.output, "  stderr_log") == (dir / "stderr.log").string());
  CHECK(report_value(r.output, "  stdout_log") == (dir / "stdout.log").string());
  CHECK_THAT(r.output, Catch::Contains("see its stderr: " + (dir / "stderr.log").string()));
  CHECK(read_file(dir / "stderr.log") == logs_stderr(1));

  TempDir out2, logs2;
  auto e = run({launcher(), "--nproc_per_node=2", port_arg(), "--log_dir", logs2.path(), kWorker},
               scenario_env(out2, "errorfile"), 60);
  CHECK(e.exit_code == 1);
  const std::string error_file = report_value(e.output, "  error_file");
  CHECK(error_file == (run_dir_in(logs2.path(), "none") / "attempt_0" / "1" / "error.json").string());
  CHECK_THAT(read_file(error_file), Catch::Contains("loss is NaN"));
}

TEST_CASE("every run ends with a summary table, and --summary_json for tools") {
  TempDir out;
  const std::string json = out.file("summary.json");
  auto r = run({launcher(), "--nproc_per_node=3", port_arg(), "--summary-json", json, kWorker},
               scenario_env(out, "fail", {{"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}}), 60);
  INFO(r.output);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.output, Catch::Contains("ddp-launch: run summary (attempt 0, exit code 3, ") &&
                           Catch::Contains("rank local_rank       pid status"));
  for (int rank = 0; rank < 3; ++rank) {
    const std::string pid = read_file(out.file("pid." + std::to_string(rank)));
    const std::string status = rank == 1 ? "exit 3" : "exit 143";
    CHECK_THAT(r.output, Catch::Contains("     " + std::to_string(rank) + "          " + std::to_string(rank) +
                                         std::string(10 - (pid.size() - 1), ' ') + pid.substr(0, pid.size() - 1) +
                                         " " + status));
  }
  // The JSON, read by a tool.
  const std::string check =
      "import json, sys\n"
      "s = json.load(open(sys.argv[1]))\n"
      "assert s['exit_code'] == 3, s\n"
      "w = s['attempts'][-1]['workers']\n"
      "assert [x['rank'] for x in w] == [0, 1, 2], w\n"
      "assert w[1]['exit_code'] == 3 and w[1]['signal'] is None, w\n"
      "assert all(x['started'] and x['pid'] > 1 and x['max_rss_kb'] > 0 and x['wall_s'] >= 0 and x['cpu_s'] >= 0 for x in w), w\n"
      "assert s['log_dir'] is None and s['host']\n"
      "print('summary ok')\n";
  auto py = run({"python3", "-c", check, json});
  INFO(py.output);
  CHECK(py.exit_code == 0);
  CHECK_THAT(py.output, Catch::Contains("summary ok"));
  CHECK((fs::status(json).permissions() & fs::perms::others_write) == fs::perms::none);

  // A successful run has its table too.
  TempDir out2;
  auto ok = run({launcher(), "--nproc_per_node=1", port_arg(), kWorker}, scenario_env(out2, "restart"), 60);
  CHECK(ok.exit_code == 0);
  CHECK_THAT(ok.output, Catch::Contains("ddp-launch: run summary (attempt 0, exit code 0, ") &&
                            Catch::Contains(" exit 0 "));
}

TEST_CASE("log options: bad values are one line naming the value, before any worker starts") {
  TempDir out;
  write_file(out.file("a-file"), "x");
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--tee", "5", kWorker}, "--tee: '5' is not a stream choice"},
      {{"-r", "0:1,x:2", kWorker}, "-r: '0:1,x:2': 'x' is not a local rank"},
      {{"--local_ranks_filter", "one", kWorker}, "--local_ranks_filter: 'one'"},
      {{"--log_dir", out.file("a-file"), "--tee=1", kWorker}, "'" + out.file("a-file") + "' is not a directory"},
      {{"--log_dir", "/proc/nope", kWorker}, "--log_dir /proc/nope: cannot create directory '/proc/nope'"},
      {{"--log_line_prefix_template", "[${host}]", "-t", "3", kWorker}, "unknown placeholder 'host'"},
      {{"--summary_json", "/nonexistent-dir/s.json", kWorker}, "--summary_json /nonexistent-dir/s.json: cannot write"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv{launcher(), port_arg()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    INFO("args: " << Catch::Detail::stringify(c.args));
    auto r = run(argv, scenario_env(out, "sleep"), 30);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::StartsWith("ddp-launch: error: ") && Catch::Contains(c.expect));
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  }
  // Named as given, also from the environment.
  auto pet = run({launcher(), port_arg(), kWorker}, scenario_env(out, "sleep", {{"PET_LOG_DIR", out.file("a-file")}}), 30);
  CHECK(pet.exit_code == 2);
  CHECK_THAT(pet.output, Catch::StartsWith("ddp-launch: error: PET_LOG_DIR=" + out.file("a-file") + ": '"));
  auto json = run({launcher(), port_arg(), "--summary-json=/nonexistent-dir/s.json", kWorker}, scenario_env(out, "sleep"), 30);
  CHECK_THAT(json.output, Catch::StartsWith("ddp-launch: error: --summary-json /nonexistent-dir/s.json: cannot write"));
  CHECK_FALSE(fs::exists(out.file("pid.0")));
}

TEST_CASE("called as torchrun: no --local_rank argument, and the link is installed beside ddp-launch") {
  TempDir out;
  const std::string torchrun = bin_path("torchrun");
  REQUIRE(fs::is_symlink(torchrun));
  CHECK(fs::read_symlink(torchrun) == "ddp-launch");
  auto r = run({torchrun, "--nproc-per-node=2", port_arg(), kWorker, "--flag"}, scenario_env(out, "env"), 60);
  REQUIRE(r.exit_code == 0);
  CHECK(parse_env_dump(read_file(out.file("env.0")))["ARGS"] == "--flag");
  CHECK(parse_env_dump(read_file(out.file("env.1")))["ARGS"] == "--flag");

  // The install rule makes the same link.
  TempDir prefix;
  const fs::path build_dir = fs::path(bin_path("ddp-launch")).parent_path().parent_path();
  if (!fs::exists(build_dir / "cmake_install.cmake")) DDP_SKIP("no cmake_install.cmake in " + build_dir.string());
  auto inst = run({"cmake", "--install", build_dir.string(), "--component", "launcher", "--prefix", prefix.path()});
  INFO(inst.output);
  if (inst.exit_code == 127) DDP_SKIP("cmake is not on PATH");
  REQUIRE(inst.exit_code == 0);
  CHECK(fs::is_symlink(prefix.file("bin/torchrun")));
  CHECK(fs::read_symlink(prefix.file("bin/torchrun")) == "ddp-launch");
  CHECK(fs::exists(prefix.file("bin/ddp-launch")));
  auto again = run({"cmake", "--install", build_dir.string(), "--component", "launcher", "--prefix", prefix.path()});
  CHECK(again.exit_code == 0);  // installing over an earlier install works
}
