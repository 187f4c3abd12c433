// --event_log_handler console: torchrun's event lines, byte for byte.
#include "ddp/launcher/report/event_log.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace ddp::launcher;

TEST_CASE("event lines are torchrun 2.x's, byte for byte") {
  StatusEvent e;
  e.state = "START";
  e.worker = true;
  e.hostname = "localhost";
  e.entry_point = "true";
  e.group_rank = 0;
  e.group_world_size = 1;
  e.global_rank = 1;
  e.local_rank = 1;
  e.role_world_size = 2;
  e.worker_id = 29412;
  // Printed by torchrun 2.11 --nproc-per-node 2 --event-log-handler console --no-python true.
  CHECK(format_status_event(e) ==
        R"({"name": "torchelastic.worker.status.START", "source": "WORKER", "timestamp": 0, "metadata": {"run_id": "none", "global_rank": 1, "group_rank": 0, "worker_id": "29412", "role": "default", "hostname": "localhost", "state": "START", "total_run_time": 0, "rdzv_backend": "static", "raw_error": null, "metadata": "{\"group_world_size\": 1, \"entry_point\": \"true\", \"local_rank\": [1], \"role_rank\": [1], \"role_world_size\": [2], \"exit_code\": [null], \"worker_pid\": [null]}", "agent_restarts": 0, "duration_ms": null}})"
        "\n");

  StatusEvent a;
  a.state = "SUCCEEDED";
  a.hostname = "localhost";
  a.entry_point = "true";
  a.group_rank = 0;
  a.group_world_size = 1;
  CHECK(format_status_event(a) ==
        R"({"name": "torchelastic.worker.status.SUCCEEDED", "source": "AGENT", "timestamp": 0, "metadata": {"run_id": "none", "global_rank": null, "group_rank": 0, "worker_id": null, "role": "default", "hostname": "localhost", "state": "SUCCEEDED", "total_run_time": 0, "rdzv_backend": "static", "raw_error": null, "metadata": "{\"group_world_size\": 1, \"entry_point\": \"true\"}", "agent_restarts": 0, "duration_ms": null}})"
        "\n");

  // A failed worker after a restart, as torchrun prints it (exit code 3; -15 for SIGTERM).
  e.state = "FAILED";
  e.worker_id = 3441;
  e.entry_point = "ev_w.sh";
  e.total_run_time = 1;
  e.agent_restarts = 1;
  e.exit_code = 3;
  e.worker_pid = 3441;
  e.raw_error = event_raw_error("/nonexistent/error.json");
  CHECK(format_status_event(e) ==
        R"({"name": "torchelastic.worker.status.FAILED", "source": "WORKER", "timestamp": 0, "metadata": {"run_id": "none", "global_rank": 1, "group_rank": 0, "worker_id": "3441", "role": "default", "hostname": "localhost", "state": "FAILED", "total_run_time": 1, "rdzv_backend": "static", "raw_error": "{\"message\": \"<NONE>\", \"errorTraits\": {\"category\": \"system_terminated_error\", \"retryability\": \"False\"}}", "metadata": "{\"group_world_size\": 1, \"entry_point\": \"ev_w.sh\", \"local_rank\": [1], \"role_rank\": [1], \"role_world_size\": [2], \"exit_code\": [3], \"worker_pid\": [3441]}", "agent_restarts": 1, "duration_ms": null}})"
        "\n");
}

TEST_CASE("a failed worker's raw_error is its error file as written") {
  char path[] = "/tmp/ddp-event-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::ofstream(path) << "{\"message\": \"ValueError: x\"}\n";
  CHECK(event_raw_error(path) == "{\"message\": \"ValueError: x\"}");
  std::remove(path);
}
