#include "ddp/launcher/supervise/outcome.h"

#include <csignal>

namespace ddp::launcher {

bool Outcome::failure() {
  if (teardown_.stopping()) return false;
  failure_seen_ = true;
  teardown_.begin(SIGTERM);
  return true;
}

void Outcome::signal(int sig) {
  const bool second_int =
      sig == SIGINT && first_int_ && now_() - *first_int_ >= std::chrono::duration<double>(kSecondSigintAfterS);
  if (sig == SIGINT && !first_int_) first_int_ = now_();
  if (failure_seen_ || workers_.running_workers() == 0) {
    if (!signal_during_teardown_) signal_during_teardown_ = sig;
  } else if (!launcher_signal_) {
    launcher_signal_ = sig;
  }
  if (second_int) teardown_.kill();  // a second Ctrl-C means now
  else teardown_.begin(sig);         // forwards sig to every group and starts the grace period
}

bool Outcome::stop_requested() {
  if (teardown_.stopping()) return false;
  teardown_.begin(SIGTERM);
  return true;
}

std::optional<WorkerExit> Outcome::root_cause(const std::optional<WorkerExit>& spawn_failure,
                                              const std::optional<WorkerExit>& claimed, bool failure_seen,
                                              const std::vector<WorkerExit>& exits) {
  if (spawn_failure) return spawn_failure;
  if (claimed) return claimed;
  if (failure_seen) return earliest_failure(exits);
  return std::nullopt;
}

}  // namespace ddp::launcher
