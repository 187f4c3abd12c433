// Black-box scenarios of each worker's stderr passing through the launcher
// (stderr_relay.h): the report quotes a failure's own words without an error
// file (stderr_failure.h), and the worker's view of its stderr is what it
// was: a terminal stays a terminal (window size too), '\r' progress and
// colour bytes arrive at once and unchanged, nothing is lost at exit. The
// real ddp-launch with a Python script or tests/launcher/stderr_worker.cpp;
// every wait is on a condition with a deadline.
#include "reference_python.h"
#include "scenario_util.h"
#include "test_skip.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <unistd.h>

using namespace ddp::test;

namespace {

std::string worker() { return bin_path("ddp-stderr-test-worker"); }

const char* kRaises =
    "import sys\n"
    "def load(i):\n"
    "    raise ValueError('bad batch')\n"
    "def step(i):\n"
    "    return load(i)\n"
    "print('epoch 1', file=sys.stderr)\n"
    "step(3)\n";

// The text of the report's "traceback  :" block ("" when there is none).
std::string report_traceback(const std::string& out) {
  const auto at = out.find("  traceback  :");
  if (at == std::string::npos) return "";
  const auto end = out.find("\n====", at);
  return out.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// What stderr_worker's "flood" writes.
std::string flood_text(size_t bytes) {
  std::string all;
  for (size_t i = 0; all.size() < bytes; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "flood line %08zu ................................\n", i);
    all += line;
  }
  all.resize(bytes);
  return all;
}

std::string crlf(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += '\r';
    out += c;
  }
  return out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("a Python script that raises without @record: the report's message is its exception line", "[torch]") {
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  TempDir out, logs;
  write_file(out.file("train.py"), kRaises);
  // Every place a worker's stderr can go: the console as it is, tee'd,
  // only the file, and nowhere (a rank outside --local_ranks_filter).
  const std::string name =
      GENERATE(as<std::string>{}, "console", "--tee 3", "--redirects 2", "--local_ranks_filter");
  std::vector<std::string> extra;
  if (name == "--tee 3") extra = {"--tee", "3", "--log_dir", logs.file("tee")};
  if (name == "--redirects 2") extra = {"--redirects", "2", "--log_dir", logs.file("redirect")};
  if (name == "--local_ranks_filter") extra = {"--local_ranks_filter", "1", "--log_dir", logs.file("filter")};
  INFO(name);
  std::vector<std::string> argv{launcher(), "--nproc_per_node=1", "--standalone"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"--use_env", "--no_python", py, out.file("train.py")});
  const auto r = run(argv, {}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(report_value(r.output, "message   ") == "ValueError: bad batch");
  const std::string tb = report_traceback(r.output);
  CHECK(tb.find("in load\n") != std::string::npos);
  CHECK(tb.find("raise ValueError('bad batch')") != std::string::npos);
  if (name == "console") {  // the worker's own lines, unchanged and unprefixed, before the report
    CHECK(r.output.find("epoch 1\nTraceback (most recent call last):\n") != std::string::npos);
    CHECK(r.output.find("\nValueError: bad batch\n") < r.output.find("Root cause"));
  }
}

// Issue 23, item 7: once init_process_group has run, torch 2.x's excepthook
// writes "[rank0]: " before every line of the traceback (torch 1.13 does
// not); the report quotes the exception all the same.
TEST_CASE("a Python rank that raises after init_process_group: the report's message is its exception line", "[torch]") {
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  TempDir out;
  write_file(out.file("train.py"),
             "import torch.distributed as dist\n"
             "dist.init_process_group('gloo')\n"
             "def step(i):\n"
             "    raise ValueError(f'bad batch {i} on rank {dist.get_rank()}')\n"
             "step(3)\n");
  const auto r = run({launcher(), "--nproc_per_node=1", "--standalone", "--use_env", "--no_python", py,
                      out.file("train.py")},
                     {}, 90);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(report_value(r.output, "message   ") == "ValueError: bad batch 3 on rank 0");
  const std::string tb = report_traceback(r.output);
  CHECK(tb.find("in step\n") != std::string::npos);
  CHECK(tb.find("[rank0]: ") == std::string::npos);
}

TEST_CASE("a C++ worker that throws uncaught: its what() is the report's message") {
  TempDir out;
  const auto r = run({launcher(), "--nproc_per_node=2", "--standalone", "--use_env", worker(), "throw",
                      "bad batch: index 7 out of range"},
                     {}, 60);
  INFO(r.output);
  CHECK(r.exit_code == 128 + SIGABRT);
  CHECK(report_value(r.output, "message   ") == "std::runtime_error: bad batch: index 7 out of range");
  CHECK(report_traceback(r.output).find("terminate called after throwing an instance of 'std::runtime_error'") !=
        std::string::npos);
}

TEST_CASE("a worker's carriage-return progress reaches the console at once and unchanged") {
  TempDir out;
  Proc p({launcher(), "--nproc_per_node=1", "--standalone", "--use_env", worker(), "progress", out.path()});
  for (int i = 1; i <= 2; ++i) {
    const std::string shown = "\r step " + std::to_string(i) + "/3";
    // No newline came yet: a relay that waits for whole lines never shows it.
    REQUIRE(wait_until([&] { return p.output().find(shown) != std::string::npos; }, 10));
    write_file(out.file("go" + std::to_string(i)), "");
  }
  REQUIRE(p.wait(30) == 0);
  CHECK(p.output().find("\r step 1/3\r step 2/3\r step 3/3\n") != std::string::npos);
}

TEST_CASE("a worker's stderr is never lost at exit: 1 MiB written just before it exits") {
  const auto r = run({launcher(), "--nproc_per_node=1", "--standalone", "--use_env", worker(), "flood",
                      std::to_string(1 << 20)},
                     {}, 60);
  REQUIRE(r.exit_code == 0);
  CHECK(r.output.size() >= (1u << 20));
  CHECK(r.output.find(flood_text(1 << 20)) != std::string::npos);
}

TEST_CASE("a worker whose stderr is a terminal still sees one, with its size, and its bytes arrive unchanged") {
  if (::access("/usr/bin/script", X_OK) != 0) DDP_SKIP("no /usr/bin/script (util-linux / bsdutils) to run the launcher on a terminal");
  if (run({"/usr/bin/script", "-qec", "test -t 2", "/dev/null"}, {}, 30).exit_code != 0)
    DDP_SKIP("script(1) cannot make a pseudo-terminal here (no /dev/ptmx or devpts)");
  TempDir out;
  // The launcher on a pseudo-terminal of `script` (123 x 45), stdin from
  // /dev/null so every worker stays in the terminal's session (the tty
  // worker resizes it through /dev/tty: the launcher must pass that on).
  auto under_tty = [&](const std::string& args) {
    const std::string cmd = "stty cols 123 rows 45; exec " + launcher() + " --nproc_per_node=1 --standalone --use_env " +
                            worker() + " " + args + " </dev/null";
    return run({"/usr/bin/script", "-qefc", cmd, "/dev/null"}, {}, 60);
  };
  SECTION("isatty, window size, SIGWINCH, colours and \\r") {
    const auto r = under_tty("tty " + out.path());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(read_file(out.file("tty")) == "isatty=1 cols=123 rows=45 followed=1");
    // The terminal's own output processing, once ("\n" -> "\r\n"), as when
    // the worker wrote to it directly.
    CHECK(r.output.find("\033[32mgreen\033[0m\r 50%\r100%\r\n") != std::string::npos);
  }
  SECTION("256 KiB written just before exit") {
    const auto r = under_tty("flood 262144");
    REQUIRE(r.exit_code == 0);
    CHECK(count_of(r.output, "flood line ") == count_of(flood_text(262144), "flood line "));
    CHECK(r.output.find(crlf(flood_text(262144))) != std::string::npos);
  }
}
