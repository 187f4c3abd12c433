#pragma once
// LocalWork: a collective run by a thread of the runtime's own (the
// shared-memory allreduce's queue), not by a c10d backend: the WorkImpl
// (work_impl.h) an AsyncWork holds for it. That thread finishes it; AsyncWork
// waits for it. It knows nothing of tensors or of shared memory. Internal to
// the runtime.

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include "work_impl.h"

namespace ddp::worker {

class LocalWork final : public WorkImpl {
 public:
  // Called once, by the thread that ran the collective: its error (null:
  // none), then the callbacks, then `done`.
  void finish(std::exception_ptr e);
  // Blocks until finish(); rethrows its error.
  void wait() override;
  bool completed() override;
  void on_completion(std::function<void(bool ok)> f) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void(bool ok)>> on_done_;  // run before `done_` is set
};

}  // namespace ddp::worker
