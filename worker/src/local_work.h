#pragma once
// LocalWork: a collective run by a thread of the runtime's own (the
// shared-memory allreduce's queue), not by a c10d backend. That thread
// finishes it; AsyncWork (process_group.h) waits for it and runs callbacks
// when it completes. It knows nothing of tensors or of shared memory.
// Internal to the runtime.

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

namespace ddp::worker {

struct LocalWork {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::vector<std::function<void()>> on_done;  // run before `done` is set

  // Called once, by the thread that ran the collective: its error (null:
  // none), then the callbacks, then `done`.
  void finish(std::exception_ptr e);
  // Blocks until finish(); rethrows its error.
  void wait();
  bool completed();
  // Runs f when finished (at once when already finished), on the finishing thread.
  void on_completion(std::function<void()> f);
};

}  // namespace ddp::worker
