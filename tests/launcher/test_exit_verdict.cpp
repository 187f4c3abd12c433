// A rank that dies of a signal after its program had finished (its heartbeat
// page's exiting mark) is reported as dying in its exit, in a library's
// teardown; the same death without the mark is a plain signal. The tiny
// heartbeat worker (programs/heartbeat_worker.cpp, ABORT_AT_END) makes both;
// the Python case (torch 2.x's Gloo threads at interpreter exit) is in
// test_python_heartbeat.cpp.
#include "scenario_util.h"
#include "test_support.h"

#include <catch2/catch.hpp>

using namespace ddp::test;

TEST_CASE("a rank that aborts after its program finished is reported as dying in its exit, without the mark it is not") {
  const bool marked = GENERATE(true, false);
  INFO("exiting mark written: " << marked);
  TempDir out;
  const auto r = run({launcher(), "--standalone", "--nproc_per_node", "2", "--use_env",
                      bin_path("ddp-heartbeat-test-worker")},
                     {{"OUT", out.path()}, {"COLLECTIVES", "3"}, {"ABORT_AT_END", marked ? "1" : "2"},
                      {"TMPDIR", out.path()}},
                     60);
  INFO(r.output);
  CHECK(r.exit_code == 134);
  CHECK(report_value(r.output, "  rank      ") == "1 (local_rank: 1)");
  CHECK(report_value(r.output, "  exitcode  ") == "134 (signal 6 (SIGABRT))");
  if (marked) {
    CHECK_THAT(r.output, Catch::Contains(" SIGABRT in exit "));  // the summary's status
    CHECK_THAT(report_value(r.output, "  in exit   "),
               Catch::StartsWith("its program had finished ") &&
                   Catch::Contains(" ms before: it died in its exit, in a library's teardown (a Python rank on torch "
                                   "2.x with Gloo: call torch.distributed.destroy_process_group() before the script "
                                   "ends)"));
  } else {
    CHECK_THAT(r.output, !Catch::Contains("in exit"));  // neither the status nor the report line
  }
}
