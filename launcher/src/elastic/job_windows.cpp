#include "ddp/launcher/elastic/job_windows.h"

#include "ddp/launcher/elastic/rdzv_link.h"

namespace ddp::launcher {

void JobWindows::publish(const std::string& host, const std::vector<WindowRank>& local) {
  if (!local.empty()) agent_.send(rdzv::lines::Command::Steps, format_node_window(host, local));
}

void JobWindows::heard(const std::string& text) { others_ = parse_job_windows(text, world_size_); }

}  // namespace ddp::launcher
