// The workers' store the launcher hosts (workers_store.h) under real torch
// clients: a Python init_process_group("gloo") job of the reference Python
// (torch 1.13 in pass 1, 2.x in pass 2) whose rank 0 is SIGKILLed in
// attempt 0; the restart meets the launcher's store on the same port.
#include "reference_python.h"
#include "scenario_util.h"
#include "test_support.h"

#include <catch2/catch.hpp>

#include <regex>
#include <set>

using namespace ddp::test;

TEST_CASE("workers store: a Python gloo job restarts after rank 0 is SIGKILLed, on the launcher's store and port",
          "[torch]") {
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  auto r = run({launcher(), "--use_env", "--nproc_per_node=2", "--max_restarts=1", "--no_python", py,
                source_path("tests/launcher/scripts/gloo_store.py")},
               {{"KILL_RANK0_ONCE", "1"}, {"OMP_NUM_THREADS", "1"}}, 240);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("attempt 0 failed: rank 0"));
  // Both ranks of attempt 1 (and rank 1 of attempt 0) reduced through the
  // launcher's store, all on one port.
  std::set<std::string> ports;
  int lines = 0;
  const std::regex line("rank (\\d) sum \\[3.0, 3.0, 3.0\\] agent True restart (\\d) port (\\d+)");
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it) {
    ++lines;
    ports.insert((*it)[3]);
  }
  CHECK(lines == 3);
  CHECK(ports.size() == 1);
  CHECK_THAT(r.output, Catch::Contains("rank 0 sum [3.0, 3.0, 3.0] agent True restart 1"));
}
