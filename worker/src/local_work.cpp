// LocalWork: a collective finished by the runtime's own thread (see local_work.h).

#include "local_work.h"

namespace ddp::worker {

void LocalWork::finish(std::exception_ptr e) {
  std::unique_lock<std::mutex> lock(mu_);
  error_ = e;
  const bool ok = !e;
  // Callbacks added while these run are run too, before `done_`.
  while (!on_done_.empty()) {
    auto callbacks = std::move(on_done_);
    on_done_.clear();
    lock.unlock();
    for (auto& f : callbacks) f(ok);
    lock.lock();
  }
  done_ = true;
  lock.unlock();
  cv_.notify_all();
}

void LocalWork::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool LocalWork::completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void LocalWork::on_completion(std::function<void(bool ok)> f) {
  bool ok;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      on_done_.push_back(std::move(f));
      return;
    }
    ok = !error_;
  }
  f(ok);
}

}  // namespace ddp::worker
