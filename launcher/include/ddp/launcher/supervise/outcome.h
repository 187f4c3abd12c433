#pragma once
// What an attempt's events mean, as pure policy over the Teardown (tests
// drive every branch with a fake Workers and clock):
//  - the first failure seen while the group runs (a worker exits non-zero
//    or dies by a signal, a worker cannot be started, a stall, an expired
//    file-timer scope) begins the teardown with SIGTERM; later ones change
//    nothing (they happen because of it);
//  - a forwarded launcher signal goes to every group and begins the same
//    teardown; a second SIGINT kills at once, when it comes at least
//    kSecondSigintAfterS after the first: one Ctrl-C is often delivered
//    twice within microseconds (by the terminal and by `timeout`, which
//    forwards it), and that is one request for a graceful stop. While a failure is torn down,
//    or once every worker has exited (only leftovers are being stopped), the
//    signal still ends the job (no restart) but is neither its cause nor its
//    exit code (signal_during_teardown);
//  - a reason from the rendezvous to stop begins the teardown unless one is
//    under way;
//  - the root cause is a spawn failure, else what a feature claims (a
//    stall's straggler), else the earliest failure (report.h).

#include "ddp/launcher/process/workers.h"
#include "ddp/launcher/report/report.h"
#include "ddp/launcher/supervise/teardown.h"

#include <optional>
#include <vector>

namespace ddp::launcher {

// A SIGINT this soon after the first is the same Ctrl-C seen twice; a
// person's second Ctrl-C comes later.
constexpr double kSecondSigintAfterS = 0.25;

class Outcome {
 public:
  Outcome(Workers& workers, Teardown& teardown, Teardown::Now now = Teardown::Clock::now)
      : workers_(workers), teardown_(teardown), now_(std::move(now)) {}

  // A failure found; true when it is the one that ends the attempt (the
  // caller then tells the rendezvous).
  bool failure();
  // A forwarded signal the launcher got.
  void signal(int sig);
  // The rendezvous asks this node to stop; true when that begins the teardown.
  bool stop_requested();

  bool failure_seen() const { return failure_seen_; }
  int launcher_signal() const { return launcher_signal_; }
  int signal_during_teardown() const { return signal_during_teardown_; }

  static std::optional<WorkerExit> root_cause(const std::optional<WorkerExit>& spawn_failure,
                                              const std::optional<WorkerExit>& claimed, bool failure_seen,
                                              const std::vector<WorkerExit>& exits);

 private:
  Workers& workers_;
  Teardown& teardown_;
  Teardown::Now now_;
  bool failure_seen_ = false;
  std::optional<Teardown::Clock::time_point> first_int_;
  int launcher_signal_ = 0;
  int signal_during_teardown_ = 0;
};

}  // namespace ddp::launcher
