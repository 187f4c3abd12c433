#pragma once
// --event_log_handler console: torchrun's worker status events, one JSON
// line each on the launcher's stderr, in the exact shape torchrun 2.x prints
// them (torch.distributed.elastic.events: json.dumps of an Event whose
// metadata holds another JSON document as a string). The supervisor emits
//  - START for every worker it started (WORKER source), per attempt;
//  - at the end of a run not stopped by a signal: each worker of the last
//    attempt SUCCEEDED, FAILED (exit code, negative signal number as
//    Python's Popen gives it, pid, the error file's JSON) or TERMINATED (a
//    worker that exited 0 in a failed group);
//  - last, the agent's SUCCEEDED (the launcher ran to its end, whatever the
//    workers did) or FAILED (a signal, a rendezvous error).
// ddp-launch adds one state of its own: STRAGGLER, a worker the straggler
// scores named while the job ran (straggler_scores.h), its numbers under
// "straggler" in the inner metadata document.
// torchrun's RENDEZVOUS and ASSIGN_WORKER_RANKS timing events are not
// emitted: static rendezvous has no such step here. Formatting is pure
// (json_writer.h, strings as Python writes them), so tests check it byte by
// byte; null is the default handler and prints nothing.

#include <optional>
#include <string>

namespace ddp::launcher {

struct StatusEvent {
  std::string state;           // START, SUCCEEDED, FAILED, TERMINATED
  bool worker = false;         // source WORKER (with the fields below), else AGENT
  std::string run_id = "none";
  std::string role = "default";
  std::string hostname;
  std::string rdzv_backend = "static";
  std::string entry_point;     // the executable's base name, as torchrun's
  std::optional<int> group_rank;
  std::optional<int> group_world_size;
  long long total_run_time = 0;  // whole seconds, set at the end of a run
  int agent_restarts = 0;
  std::optional<std::string> raw_error;
  // Worker events only.
  int global_rank = 0;
  int local_rank = 0;
  int role_world_size = 1;
  long long worker_id = 0;     // its pid
  std::optional<int> exit_code;
  std::optional<long long> worker_pid;
  // More members of the inner metadata document, as JSON ("\"k\": v, ...",
  // as json::Writer::members() writes them), "" for none: ddp-launch's own
  // STRAGGLER event puts its numbers there.
  std::string more_metadata;
};

// One line, "\n" included.
std::string format_status_event(const StatusEvent& e);

// raw_error of a FAILED worker: its error file's JSON as written, or
// torchrun's stand-in when there is none.
std::string event_raw_error(const std::string& error_file);

}  // namespace ddp::launcher
