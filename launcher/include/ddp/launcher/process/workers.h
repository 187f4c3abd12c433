#pragma once
// What the supervisor's policies need of the workers' processes: signal
// every group, how many workers are not yet reaped, whether any process of
// the groups is left. WorkerGroup is the real one; tests drive the policies
// with a fake (tests/launcher/test_attempt_policy.cpp), as ninja's
// CommandRunner fake.

namespace ddp::launcher {

class Workers {
 public:
  virtual ~Workers() = default;
  // Sends sig to every group still there; returns how many.
  virtual int signal_all(int sig) = 0;
  // Workers started and not yet reaped.
  virtual int running_workers() const = 0;
  // No process of any group is left.
  virtual bool empty() const = 0;
};

}  // namespace ddp::launcher
