#include "ddp/launcher/report/event_log.h"

#include "ddp/common/json_writer.h"

#include <fstream>
#include <sstream>

namespace ddp::launcher {

std::string format_status_event(const StatusEvent& e) {
  // The inner document (torchrun's md, json.dumps'd into a string).
  json::Writer md;
  md.object().key("group_world_size").integer_or_null(e.group_world_size).key("entry_point").string(e.entry_point);
  if (e.worker) {
    md.key("local_rank").array().integer(e.local_rank).end();
    md.key("role_rank").array().integer(e.global_rank).end();
    md.key("role_world_size").array().integer(e.role_world_size).end();
    md.key("exit_code").array().integer_or_null(e.exit_code).end();
    md.key("worker_pid").array().integer_or_null(e.worker_pid).end();
  }
  md.raw(e.more_metadata).end();
  json::Writer j;
  j.object().key("name").string("torchelastic.worker.status." + e.state).key("source").string(e.worker ? "WORKER" : "AGENT");
  j.key("timestamp").integer(0).key("metadata").object();
  j.key("run_id").string(e.run_id).key("global_rank");
  e.worker ? j.integer(e.global_rank) : j.null();
  j.key("group_rank").integer_or_null(e.group_rank).key("worker_id");
  e.worker ? j.string(std::to_string(e.worker_id)) : j.null();
  j.key("role").string(e.role).key("hostname").string(e.hostname).key("state").string(e.state);
  j.key("total_run_time").integer(e.total_run_time).key("rdzv_backend").string(e.rdzv_backend).key("raw_error");
  e.raw_error ? j.string(*e.raw_error) : j.null();
  j.key("metadata").string(md.text()).key("agent_restarts").integer(e.agent_restarts).key("duration_ms").null();
  j.end().end();
  return j.text() + "\n";
}

std::string event_raw_error(const std::string& error_file) {
  std::ifstream in(error_file);
  if (in) {
    std::ostringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    if (!s.empty()) return s;
  }
  // torchrun's ProcessFailure when a worker left no error file.
  return "{\"message\": \"<NONE>\", \"errorTraits\": {\"category\": \"system_terminated_error\", \"retryability\": "
         "\"False\"}}";
}

}  // namespace ddp::launcher
