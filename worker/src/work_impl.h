#pragma once
// WorkImpl: what an AsyncWork (process_group.h) holds, one collective in
// flight as the runtime issued it. Two kinds: a c10d backend's Work
// (C10dWork, async_work.cpp) and a collective the runtime's own thread runs
// (LocalWork, local_work.h). The public header only forward-declares it, so
// c10d's types stay out of it without erasing them to void. AsyncWork adds
// the error message and the heartbeat; an implementation adds neither.
// Internal to the runtime.

#include <functional>

namespace ddp::worker {

class WorkImpl {
 public:
  virtual ~WorkImpl() = default;
  // Blocks until the collective finished, and until what on_completion
  // registered has run; throws the collective's error.
  virtual void wait() = 0;
  virtual bool completed() = 0;
  // Runs f(ok) once the collective finished (ok: without an error), on the
  // thread that finishes it, or at once when it already has. A kind that
  // cannot tell its end (a backend whose work has no future) never runs f.
  virtual void on_completion(std::function<void(bool ok)> f) = 0;
};

}  // namespace ddp::worker
