#include "ddp/launcher/report/event_log.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace ddp::launcher {

namespace {

// One code point from UTF-8 at s[i]; advances i. Invalid bytes give U+FFFD
// (Python's errors="replace" when it read the bytes).
unsigned next_code_point(const std::string& s, size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + static_cast<size_t>(len) > s.size()) {
    ++i;
    return 0xFFFD;
  }
  unsigned cp = len == 1 ? b : b & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((c >> 6) != 2) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  i += static_cast<size_t>(len);
  return cp;
}

void u_escape(std::string& out, unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\u%04x", v);
  out += buf;
}

std::string opt_int(const std::optional<long long>& v) { return v ? std::to_string(*v) : "null"; }
std::string opt_int(const std::optional<int>& v) { return v ? std::to_string(*v) : "null"; }

}  // namespace

std::string python_json_string(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const unsigned cp = next_code_point(s, i);
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20) {
          u_escape(out, cp);
        } else if (cp < 0x80) {
          out += static_cast<char>(cp);
        } else if (cp < 0x10000) {
          u_escape(out, cp);
        } else {  // a surrogate pair, as Python writes it
          const unsigned v = cp - 0x10000;
          u_escape(out, 0xD800 + (v >> 10));
          u_escape(out, 0xDC00 + (v & 0x3FF));
        }
    }
  }
  return out + "\"";
}

std::string format_status_event(const StatusEvent& e) {
  // The inner document (torchrun's md, json.dumps'd into a string).
  std::string md = "{\"group_world_size\": " + opt_int(e.group_world_size) +
                   ", \"entry_point\": " + python_json_string(e.entry_point);
  if (e.worker) {
    md += ", \"local_rank\": [" + std::to_string(e.local_rank) + "], \"role_rank\": [" +
          std::to_string(e.global_rank) + "], \"role_world_size\": [" + std::to_string(e.role_world_size) +
          "], \"exit_code\": [" + opt_int(e.exit_code) + "], \"worker_pid\": [" + opt_int(e.worker_pid) + "]";
  }
  if (!e.more_metadata.empty()) md += ", " + e.more_metadata;
  md += "}";
  std::string out = "{\"name\": " + python_json_string("torchelastic.worker.status." + e.state) +
                    ", \"source\": \"" + (e.worker ? "WORKER" : "AGENT") + "\", \"timestamp\": 0, \"metadata\": {" +
                    "\"run_id\": " + python_json_string(e.run_id) +
                    ", \"global_rank\": " + (e.worker ? std::to_string(e.global_rank) : "null") +
                    ", \"group_rank\": " + opt_int(e.group_rank) +
                    ", \"worker_id\": " + (e.worker ? python_json_string(std::to_string(e.worker_id)) : "null") +
                    ", \"role\": " + python_json_string(e.role) + ", \"hostname\": " + python_json_string(e.hostname) +
                    ", \"state\": " + python_json_string(e.state) +
                    ", \"total_run_time\": " + std::to_string(e.total_run_time) +
                    ", \"rdzv_backend\": " + python_json_string(e.rdzv_backend) +
                    ", \"raw_error\": " + (e.raw_error ? python_json_string(*e.raw_error) : "null") +
                    ", \"metadata\": " + python_json_string(md) +
                    ", \"agent_restarts\": " + std::to_string(e.agent_restarts) + ", \"duration_ms\": null}}\n";
  return out;
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
