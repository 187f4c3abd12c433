// LocalWork: a collective finished by the runtime's own thread (see local_work.h).

#include "local_work.h"

namespace ddp::worker {

void LocalWork::finish(std::exception_ptr e) {
  std::unique_lock<std::mutex> lock(mu);
  error = e;
  // Callbacks added while these run are run too, before `done`.
  while (!on_done.empty()) {
    auto callbacks = std::move(on_done);
    on_done.clear();
    lock.unlock();
    for (auto& f : callbacks) f();
    lock.lock();
  }
  done = true;
  lock.unlock();
  cv.notify_all();
}

void LocalWork::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (error) std::rethrow_exception(error);
}

bool LocalWork::completed() {
  std::lock_guard<std::mutex> lock(mu);
  return done;
}

void LocalWork::on_completion(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!done) {
      on_done.push_back(std::move(f));
      return;
    }
  }
  f();
}

}  // namespace ddp::worker
