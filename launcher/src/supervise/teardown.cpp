#include "ddp/launcher/supervise/teardown.h"

#include <csignal>

namespace ddp::launcher {

namespace {

Teardown::Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Teardown::Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

Teardown::Teardown(Workers& workers, double grace_s, double after_kill_s, Now now)
    : workers_(workers), grace_(seconds(grace_s)), after_kill_(seconds(after_kill_s)), now_(std::move(now)) {}

void Teardown::begin(int sig) {
  workers_.signal_all(sig);
  if (stopping_) return;
  stopping_ = true;
  deadline_ = now_() + grace_;
}

void Teardown::kill() {
  workers_.signal_all(SIGKILL);
  if (killed_) return;
  killed_ = true;
  stopping_ = true;
  deadline_ = now_() + after_kill_;
}

void Teardown::workers_gone() {
  if (leftovers_termed_ || workers_.empty()) return;
  leftovers_termed_ = true;
  if (stopping_) workers_.signal_all(SIGTERM);
  else begin(SIGTERM);
}

std::optional<Teardown::Clock::time_point> Teardown::deadline() const {
  if (!stopping_) return std::nullopt;
  return deadline_;
}

}  // namespace ddp::launcher
