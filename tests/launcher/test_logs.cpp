// The log options without processes: parsing (--redirects, --tee,
// --local_ranks_filter, the prefix template), the per-rank plan, the
// OutputTee over real pipes, the run summary and its JSON, the torchrun name.
#include "ddp/launcher/config/invocation.h"
#include "ddp/launcher/config/log_spec.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/output/output_tee.h"
#include "ddp/launcher/report/summary.h"

#include <catch2/catch.hpp>

#include "usage_message.h"

#include <csignal>
#include <cstdlib>
#include <set>
#include <fcntl.h>
#include <string>
#include <unistd.h>

using namespace ddp::launcher;
using ddp::test::usage_message;

namespace {


// Everything readable from a non-blocking fd right now.
std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    REQUIRE(n > 0);
    done += static_cast<size_t>(n);
  }
}

// A pipe whose read end never blocks (a console or a log file stand-in).
struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    r = p[0];
    w = p[1];
    ::fcntl(r, F_SETFL, O_NONBLOCK);
    // Room for the long line below, so nothing here ever blocks.
    REQUIRE(::fcntl(w, F_SETPIPE_SZ, 1 << 20) >= (1 << 20));
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
};

}  // namespace

TEST_CASE("values of --redirects and --tee: one for all, or per local rank") {
  auto all = parse_std_spec("3", "--tee");
  CHECK(all.for_rank(0) == kStdAll);
  CHECK(all.for_rank(7) == kStdAll);
  CHECK(all.any());
  CHECK_FALSE(parse_std_spec("0", "--tee").any());
  auto map = parse_std_spec("0:1,1:2,12:3", "--tee");
  CHECK(map.for_rank(0) == kStdOut);
  CHECK(map.for_rank(1) == kStdErr);
  CHECK(map.for_rank(12) == kStdAll);
  CHECK(map.for_rank(2) == kStdNone);  // ranks not named: nothing
  CHECK_FALSE(parse_std_spec("0:0", "-r").any());
  for (const std::string bad : {"4", "", "x", "1,2", "0:4", ":1", "0:", "a:1", "0:1,0:2", "-1:1", "0:1,"}) {
    INFO("value '" << bad << "'");
    CHECK_THROWS_WITH(parse_std_spec(bad, "--tee"), Catch::StartsWith("--tee: '" + bad + "'"));
  }
}

TEST_CASE("parsing --local_ranks_filter and the prefix template") {
  CHECK(parse_rank_filter("0", "f") == std::set<int>{0});
  CHECK(parse_rank_filter("0,2,2", "f") == std::set<int>{0, 2});
  for (const std::string bad : {"", "x", "0,", "1;2", "-1", " 1"})
    CHECK_THROWS_WITH(parse_rank_filter(bad, "--local_ranks_filter"),
                      Catch::StartsWith("--local_ranks_filter: '" + bad + "' is not a list of local ranks"));
  CHECK(expand_prefix(kDefaultPrefixTemplate, "default", 5, 1) == "[default1]:");
  CHECK(expand_prefix("${role_name}-${rank}/$local_rank $$ $ ${x", "trainer", 9, 3) == "trainer-9/3 $ $ ${x");
  CHECK_NOTHROW(check_prefix_template("[${rank}]:", "t"));
  CHECK_THROWS_WITH(check_prefix_template("[${host}]:", "--log_line_prefix_template"),
                    Catch::StartsWith("--log_line_prefix_template: '[${host}]:' has an unknown placeholder 'host'"));
}

TEST_CASE("where each stream goes: torchrun's rules") {
  LogOptions l;
  CHECK(plan_output(l, 0).out == StreamTarget::Console);
  CHECK_FALSE(l.needs_dir());
  l.redirects = parse_std_spec("1", "-r");
  l.tee = parse_std_spec("0:2", "-t");
  CHECK(l.needs_dir());
  CHECK(plan_output(l, 0).out == StreamTarget::File);
  CHECK(plan_output(l, 0).err == StreamTarget::Tee);      // a tee'd stream is written to the file too
  CHECK(plan_output(l, 1).err == StreamTarget::Console);
  l.ranks_filter = std::set<int>{1};
  CHECK(plan_output(l, 0).err == StreamTarget::File);     // filtered out: the file only
  CHECK(plan_output(l, 2).err == StreamTarget::Null);     // filtered out and not redirected: nowhere
  CHECK(plan_output(l, 1).err == StreamTarget::Console);
  LogOptions dir_only;
  dir_only.dir = "/logs";
  CHECK(dir_only.needs_dir());  // error files go there
}

TEST_CASE("log options: both spellings, short names, PET_ variables, bad values") {
  auto o = parse_launch_options({"--log-dir", "/l", "-r", "0:1", "--tee=3", "--local-ranks-filter=0,1",
                                 "--log-line-prefix-template", "<${rank}>", "--summary-json", "s.json", "x"},
                                {});
  CHECK(o.logs.dir == "/l");
  CHECK(o.logs.redirects.for_rank(0) == kStdOut);
  CHECK(o.logs.tee.for_rank(5) == kStdAll);
  CHECK(o.logs.ranks_filter == std::set<int>{0, 1});
  CHECK(o.logs.prefix_template == "<${rank}>");
  CHECK(o.summary_json == "s.json");
  auto pet = parse_launch_options({"x"}, {{"PET_LOG_DIR", "/p"}, {"PET_TEE", "2"}, {"PET_REDIRECTS", "1"},
                                          {"PET_LOCAL_RANKS_FILTER", "3"}, {"PET_SUMMARY_JSON", "/s.json"}});
  CHECK(pet.logs.dir == "/p");
  CHECK(pet.logs.tee.for_rank(0) == kStdErr);
  CHECK(pet.logs.redirects.for_rank(0) == kStdOut);
  CHECK(pet.logs.ranks_filter == std::set<int>{3});
  CHECK(pet.summary_json == "/s.json");
  CHECK(parse_launch_options({"-t", "1", "x"}, {{"PET_TEE", "2"}}).logs.tee.for_rank(0) == kStdOut);  // CLI wins
  // torchrun 2.x reads the template from this variable; the option wins over it.
  CHECK(parse_launch_options({"x"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${rank}]:"}}).logs.prefix_template ==
        "[${rank}]:");
  CHECK(parse_launch_options({"--log_line_prefix_template=a", "x"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "b"}})
            .logs.prefix_template == "a");
  // torchrun's defaults: nothing happens.
  auto d = parse_launch_options({"--tee", "0", "-r", "0", "x"}, {{"PET_LOG_DIR", ""}, {"PET_LOCAL_RANKS_FILTER", ""}});
  CHECK_FALSE(d.logs.needs_dir());
  CHECK_FALSE(d.logs.ranks_filter);

  CHECK_THAT(usage_message({"--tee", "5", "x"}), Catch::StartsWith("--tee: '5' is not a stream choice"));
  CHECK_THAT(usage_message({"-r", "0:9", "x"}), Catch::StartsWith("-r: '0:9' is not a stream choice"));
  CHECK_THAT(usage_message({"x"}, {{"PET_TEE", "all"}}), Catch::StartsWith("PET_TEE: 'all' is not a stream choice"));
  CHECK_THAT(usage_message({"--local-ranks-filter", "a", "x"}),
             Catch::StartsWith("--local-ranks-filter: 'a' is not a list of local ranks"));
  CHECK_THAT(usage_message({"--log_line_prefix_template", "${nope}", "x"}), Catch::Contains("unknown placeholder 'nope'"));
  CHECK_THAT(usage_message({"x"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "$host"}}),
             Catch::StartsWith("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: '$host' has an unknown placeholder"));
  CHECK_THAT(usage_message({"--summary_json", "", "x"}), Catch::StartsWith("--summary_json: empty path"));
}

TEST_CASE("the tee: whole prefixed lines on the console, the exact bytes in the file", "[tsan]") {
  Pipe console, file;
  OutputTee tee;
  const int w0 = tee.add(::dup(file.w), "/f0", console.w, "[default0]:");
  Pipe file1;
  const int w1 = tee.add(::dup(file1.w), "/f1", console.w, "[default1]:");
  CHECK(tee.fds().size() == 2);

  // Half a line from each, then the rest: the console never shows a half.
  write_all(w0, "hel");
  write_all(w1, "wor");
  tee.pump();
  CHECK(read_all(console.r).empty());
  write_all(w0, "lo\nsecond ");
  write_all(w1, "ld\n");
  tee.pump();
  CHECK(read_all(console.r) == "[default0]:hello\n[default1]:world\n");

  // A line longer than a pipe buffer, in pieces, interleaved with the other.
  const std::string long_line(300 * 1024, 'x');
  for (size_t at = 0; at < long_line.size(); at += 50000) {
    write_all(w1, long_line.substr(at, 50000));
    write_all(w0, "line\n");
    tee.pump();
  }
  write_all(w1, "\n");
  tee.pump();
  std::string expect_console = "[default0]:second line\n", expect_file = "hello\nsecond line\n";
  for (size_t at = 50000; at < long_line.size(); at += 50000) {
    expect_console += "[default0]:line\n";
    expect_file += "line\n";
  }
  CHECK(read_all(console.r) == expect_console + "[default1]:" + long_line + "\n");

  // Binary junk and a last line without a newline.
  const std::string junk("\x00\xff\x01\r\x1b[31m\x80", 9);
  write_all(w0, junk + "\nend");
  ::close(w0);
  ::close(w1);
  tee.finish();
  // A '\r' in a line starts a redraw: the piece after it gets the prefix too.
  CHECK(read_all(console.r) == "[default0]:" + junk.substr(0, 4) + "[default0]:" + junk.substr(4) + "\n[default0]:end\n");
  CHECK(read_all(file.r) == expect_file + junk + "\nend");
  CHECK(read_all(file1.r) == "world\n" + long_line + "\n");
  CHECK(tee.fds().empty());
}

// Issue 51 item 12: a tqdm-style bar redrawn with '\r' showed nothing under
// --tee until its final newline; torchrun shows every update.
TEST_CASE("the tee: a progress bar redrawn in place (carriage returns) moves on the console, each redraw prefixed", "[tsan]") {
  Pipe console, file;
  OutputTee tee;
  const int w0 = tee.add(::dup(file.w), "/f0", console.w, "[r0]:");
  write_all(w0, "\r 10%|#");
  tee.pump();
  CHECK(read_all(console.r).empty());  // not whole until the next redraw
  write_all(w0, "\r 20%|##\r 30%|###");
  tee.pump();
  CHECK(read_all(console.r) == "[r0]: 10%|#\r[r0]: 20%|##\r");
  write_all(w0, "\r100%|####|\nnext\n");
  tee.pump();
  CHECK(read_all(console.r) == "[r0]: 30%|###\r[r0]:100%|####|\n[r0]:next\n");
  ::close(w0);
  tee.finish();
  CHECK(read_all(file.r) == "\r 10%|#\r 20%|##\r 30%|###\r100%|####|\nnext\n");  // the file: the bytes as written
}

// Issue 51 item 12: a line left open by a pause (a prompt, a bar drawn
// without '\r', a bar's latest redraw) showed nothing under --tee until more
// came; on a terminal it is shown once its stream has been quiet for kPause.
TEST_CASE("the tee: on a terminal, a line left open by a pause is shown, and its whole line overwrites it", "[tsan]") {
  using namespace std::chrono_literals;
  Pipe console, file;
  OutputTee tee;
  const int w0 = tee.add(::dup(file.w), "/f0", console.w, "[r0]:");
  write_all(w0, "loss 0.5 | epoch 1: 50%");
  tee.pump();
  // A pipe or a file as the console (Slurm's output, `| tee`): whole lines only.
  CHECK_FALSE(tee.pause_due());
  tee.show_paused(OutputTee::Clock::now() + 1h);
  CHECK(read_all(console.r).empty());

  tee.show_pauses_on(console.w);  // as add() does for a terminal (isatty)
  const auto due = tee.pause_due();
  REQUIRE(due);
  tee.show_paused(*due - 1ms);
  CHECK(read_all(console.r).empty());  // not quiet long enough
  tee.show_paused(*due);
  CHECK(read_all(console.r) == "[r0]:loss 0.5 | epoch 1: 50%\r");
  CHECK_FALSE(tee.pause_due());  // shown once, until more comes
  tee.show_paused(*due + 1h);
  CHECK(read_all(console.r).empty());

  write_all(w0, " 60%");
  tee.pump();
  REQUIRE(tee.pause_due());
  tee.show_paused(*tee.pause_due());
  CHECK(read_all(console.r) == "[r0]:loss 0.5 | epoch 1: 50% 60%\r");
  write_all(w0, " done\n");
  tee.pump();
  CHECK(read_all(console.r) == "[r0]:loss 0.5 | epoch 1: 50% 60% done\n");
  CHECK_FALSE(tee.pause_due());
  ::close(w0);
  tee.finish();
  CHECK(read_all(file.r) == "loss 0.5 | epoch 1: 50% 60% done\n");  // the file: the bytes as written
}

TEST_CASE("the tee: a terminal as the console is found by itself (isatty)") {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  REQUIRE(slave >= 0);
  Pipe file;
  OutputTee tee;
  const int w0 = tee.add(::dup(file.w), "/f0", slave, "[r0]:");
  write_all(w0, "Password: ");
  tee.pump();
  CHECK(tee.pause_due());
  ::close(w0);
  tee.finish();
  ::close(slave);
  ::close(master);
}

TEST_CASE("the tee: a console that went away stops the copy, not the files or the launcher", "[tsan]") {
  Pipe console, file;
  OutputTee tee;
  const int w = tee.add(::dup(file.w), "/f", console.w, "[default0]:");
  ::close(console.r);
  console.r = -1;
  write_all(w, "a\nb\n");
  tee.pump();  // EPIPE with SIGPIPE blocked and drained: we are still here
  write_all(w, "c\n");
  ::close(w);
  tee.finish();
  CHECK(read_all(file.r) == "a\nb\nc\n");
  sigset_t pending;
  ::sigpending(&pending);
  CHECK_FALSE(sigismember(&pending, SIGPIPE));
}

TEST_CASE("run summary: a row per rank of the last attempt, and JSON for tools") {
  AttemptResult a;
  a.attempt = 1;
  WorkerExit w1;
  w1.rank = 1;
  w1.local_rank = 1;
  w1.pid = 4242;
  w1.signaled = true;
  w1.code = SIGSEGV;
  w1.wall_s = 12.345;
  w1.cpu_s = 10.5;
  w1.max_rss_kb = 20480;
  w1.stderr_log = "/l/\"q\"/stderr.log";
  WorkerExit w0;
  w0.rank = 0;
  w0.pid = 4241;
  w0.code = 0;
  w0.wall_s = 1.5;
  w0.cpu_s = 0.25;
  w0.max_rss_kb = 3000;
  a.exits = {w1, w0};  // exit order; the table is by rank
  a.root_cause = w1;
  RunTotals t;
  t.exit_code = 139;
  t.wall_s = 13;
  t.host = "node1";
  const std::string table = format_run_summary({a}, t);
  CHECK_THAT(table, Catch::StartsWith("ddp-launch: run summary (attempt 1, exit code 139, 13.00 s)\n"));
  CHECK_THAT(table, Catch::Contains("rank local_rank       pid status"));
  const auto row0 = table.find("     0          0      4241 exit 0");
  const auto row1 = table.find("     1          1      4242 SIGSEGV");
  CHECK(row0 != std::string::npos);
  CHECK(row1 != std::string::npos);
  CHECK(row0 < row1);
  CHECK_THAT(table, Catch::Contains("12.35") && Catch::Contains("10.50") && Catch::Contains("20 MiB") &&
                        Catch::Contains("3000 KiB"));
  const std::string json = format_summary_json({a}, t);
  CHECK_THAT(json, Catch::Contains("\"exit_code\": 139") && Catch::Contains("\"signal\": \"SIGSEGV\"") &&
                       Catch::Contains("\"stderr_log\": \"/l/\\\"q\\\"/stderr.log\"") && Catch::Contains("\"log_dir\": null"));

  // Thousands of ranks: the table stays short, the JSON has them all.
  AttemptResult big;
  for (int r = 0; r < kSummaryRows + 10; ++r) {
    WorkerExit w;
    w.rank = w.local_rank = r;
    w.pid = 100 + r;
    big.exits.push_back(w);
  }
  CHECK_THAT(format_run_summary({big}, t), Catch::Contains("... and 10 more ranks"));
  CHECK_THAT(format_summary_json({big}, t), Catch::Contains("\"rank\": " + std::to_string(kSummaryRows + 9) + ","));
}

TEST_CASE("the run summary says which workers were never started, and points at --summary_json only when given") {
  // issue 23 item 15: an attempt stopped while it was starting 300 workers
  // listed the 2 it had started and said nothing of the other 298; and the
  // overflow line named --summary_json when none was given.
  AttemptResult a;
  a.attempt = 0;
  for (int r = 0; r < 2; ++r) {
    WorkerExit w;
    w.rank = w.local_rank = r;
    w.pid = 100 + r;
    w.code = r == 0 ? 3 : 0;
    a.exits.push_back(w);
  }
  a.never_started = {2, 3, 4, 5, 9};
  RunTotals t;
  t.exit_code = 3;
  const std::string table = format_run_summary({a}, t);
  CHECK_THAT(table, Catch::Contains("  ranks 2-5,9 (5 workers) were never started: the attempt was stopped before "
                                    "their turn\n"));
  CHECK_THAT(format_summary_json({a}, t), Catch::Contains("\"never_started\": [2, 3, 4, 5, 9]"));
  a.never_started = {7};
  CHECK_THAT(format_run_summary({a}, t), Catch::Contains("  rank 7 (1 worker) was never started: "));
  a.never_started.clear();
  CHECK_THAT(format_run_summary({a}, t), !Catch::Contains("never started"));
  CHECK_THAT(format_summary_json({a}, t), !Catch::Contains("never_started"));

  AttemptResult big;
  for (int r = 0; r < kSummaryRows + 10; ++r) {
    WorkerExit w;
    w.rank = w.local_rank = r;
    w.pid = 100 + r;
    big.exits.push_back(w);
  }
  CHECK_THAT(format_run_summary({big}, t), Catch::EndsWith("  ... and 10 more ranks (--summary_json FILE lists every rank)\n"));
  t.summary_json = true;
  CHECK_THAT(format_run_summary({big}, t), Catch::EndsWith("  ... and 10 more ranks (every rank is in --summary_json)\n"));
}

TEST_CASE("the run summary labels a multi-node job's score as this node's (issue 51 item 11)") {
  // A 2-node job: this launcher's rank 2 scored 1.00 against its own node,
  // while the straggler line, over every node's windows, named it at 0.58.
  AttemptResult a;
  WorkerExit w;
  w.rank = 2;
  w.pid = 100;
  RankStepStats st;
  st.steps = 10;
  st.relative_score = 1;
  w.steps = st;
  a.exits.push_back(w);
  RunTotals t;
  CHECK_THAT(format_run_summary({a}, t), Catch::Contains(" score\n") && !Catch::Contains("node_score"));
  t.several_nodes = true;
  CHECK_THAT(format_run_summary({a}, t),
             Catch::Contains(" node_score\n") && Catch::Contains(" 1.00\n") &&
                 Catch::Contains("  node_score: against the fastest rank of this node; the straggler line compares the "
                                 "ranks of every node\n"));
}

TEST_CASE("the torchrun name") {
  CHECK(invoked_as_torchrun("torchrun"));
  CHECK(invoked_as_torchrun("/opt/ddp/bin/torchrun"));
  CHECK_FALSE(invoked_as_torchrun("ddp-launch"));
  CHECK_FALSE(invoked_as_torchrun("/bin/torchrun2"));
  CHECK_FALSE(invoked_as_torchrun("/torchrun/ddp-launch"));
}

TEST_CASE("duplicate_*_filters: torchrun's list syntax, ',,' for a comma", "[tsan]") {
  CHECK(parse_filter_list("apple,orange", "f") == std::vector<std::string>{"apple", "orange"});
  CHECK(parse_filter_list("a,,b", "f") == std::vector<std::string>{"a,b"});
  CHECK(parse_filter_list("a,,,b", "f") == std::vector<std::string>{"a,", "b"});  // left to right, as Python's replace
  CHECK(parse_filter_list("loss = ", "f") == std::vector<std::string>{"loss = "});
  CHECK(parse_filter_list("", "f").empty());
  CHECK_THROWS_WITH(parse_filter_list("a,", "--duplicate_stdout_filters"),
                    Catch::StartsWith("--duplicate_stdout_filters 'a,': an empty filter would copy every line"));
}

TEST_CASE("duplicate_*_filters copy tee'd console lines only, and say so when nothing is tee'd", "[tsan]") {
  LogOptions logs;
  logs.dup_stdout_filters = {"loss"};
  CHECK_THAT(duplicate_filters_warning(logs, 2),
             Catch::Equals("ddp-launch: warning: --duplicate_stdout_filters copies tee'd stdout lines, but no rank's "
                           "stdout is tee'd to the console (give --tee 1 or 3); nothing is copied\n"));
  logs.tee = parse_std_spec("1:1", "t");
  CHECK(tees_to_console(logs, 2, kStdOut));
  CHECK_FALSE(tees_to_console(logs, 1, kStdOut));  // rank 1 does not exist
  CHECK_FALSE(tees_to_console(logs, 2, kStdErr));
  CHECK(duplicate_filters_warning(logs, 2).empty());
  logs.ranks_filter = std::set<int>{0};  // rank 1 tee'd but hidden: its lines go to its file only
  CHECK_FALSE(tees_to_console(logs, 2, kStdOut));
  logs.ranks_filter.reset();
  logs.dup_stderr_filters = {"x"};
  CHECK_THAT(duplicate_filters_warning(logs, 2), Catch::Contains("--duplicate_stderr_filters") &&
                                                     Catch::Contains("(give --tee 2 or 3)"));
}

TEST_CASE("the tee: lines matching a duplicate filter also go, prefixed, to the filtered file", "[tsan]") {
  Pipe console, file0, file1, filtered;
  OutputTee tee;
  // "default1" is only in rank 1's prefix: filters see the worker's line, not the prefix.
  tee.duplicate(console.w, ::dup(filtered.w), "/filtered_stdout.log", {"loss", "a,b", "default1"});
  const int w0 = tee.add(::dup(file0.w), "/f0", console.w, "[default0]:");
  const int w1 = tee.add(::dup(file1.w), "/f1", console.w, "[default1]:");
  write_all(w0, "step 1\nloss 0.5\npartial lo");
  write_all(w1, "a,b\nrank1 ok\n");
  tee.pump();
  write_all(w0, "ss\n");
  write_all(w1, "last loss");  // no newline: ends with the stream
  ::close(w0);
  ::close(w1);
  tee.finish();
  CHECK(read_all(filtered.r) == "[default0]:loss 0.5\n[default1]:a,b\n[default0]:partial loss\n[default1]:last loss\n");
  CHECK(read_all(file0.r) == "step 1\nloss 0.5\npartial loss\n");
  CHECK(read_all(console.r).find("[default0]:step 1\n") != std::string::npos);
}
