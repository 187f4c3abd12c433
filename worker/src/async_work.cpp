// AsyncWork: one collective in flight, over a c10d backend's Work (C10dWork
// here) or a collective of the runtime's own thread (LocalWork), and its two
// makers (async_work.h). See process_group.h.

#include "async_work.h"

#include <memory>
#include <stdexcept>
#include <utility>

#include "ddp/worker/peer_failure.h"
#include "error_text.h"
#include "heartbeat_recorder.h"
#include "local_work.h"
#include "work_impl.h"

namespace ddp::worker {

namespace {

// A collective a c10d backend issued.
class C10dWork final : public WorkImpl {
 public:
  explicit C10dWork(c10::intrusive_ptr<compat::Work> work) : work_(std::move(work)) {}

  void wait() override {
    work_->wait();
    if (after_) after_->wait();
  }

  bool completed() override { return work_->isCompleted(); }

  void on_completion(std::function<void(bool ok)> f) override {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    try {
      future = work_->getFuture();
    } catch (const std::exception&) {
      return;  // this backend's work has no future: no completion time
    }
    // A failed collective runs the callback too, with an error in the future.
    after_ = future->then(
        [f = std::move(f)](c10::ivalue::Future& done) {
          f(!done.hasError());
          return c10::IValue();
        },
        c10::NoneType::get());
  }

 private:
  c10::intrusive_ptr<compat::Work> work_;
  c10::intrusive_ptr<c10::ivalue::Future> after_;  // on_completion's future: wait() waits for it too
};

}  // namespace

AsyncWork make_work(c10::intrusive_ptr<compat::Work> w, std::string what, int rank) {
  return AsyncWork(std::make_shared<C10dWork>(std::move(w)), std::move(what), rank);
}

AsyncWork done_at_once(std::string what, int rank) {
  auto w = std::make_shared<LocalWork>();
  w->finish(nullptr);
  return AsyncWork(std::move(w), std::move(what), rank);
}

AsyncWork::AsyncWork(std::shared_ptr<WorkImpl> work, std::string what, int rank)
    : work_(std::move(work)), what_(std::move(what)), rank_(rank) {}

void AsyncWork::wait() {
  if (!work_) return;
  try {
    const uint64_t waiting_since = recorder_ ? monotonic_ns() : 0;
    work_->wait();
    if (recorder_) {
      recorder_->waited(monotonic_ns() - waiting_since);
      recorder_->finished(seq_);
    }
  } catch (const PeerFailure& e) {  // a peer known to have died: keep who it was
    throw PeerFailure(e.peer_rank(), "rank " + std::to_string(rank_) + ": " + what_ +
                                         " failed (a peer may have exited or timed out): " + error_text(e));
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(rank_) + ": " + what_ +
                             " failed (a peer may have exited or timed out): " + error_text(e));
  }
}

bool AsyncWork::completed() const { return !work_ || work_->completed(); }

void AsyncWork::record_finish(std::shared_ptr<CollectiveRecorder> recorder, std::uint64_t seq) {
  recorder_ = std::move(recorder);
  seq_ = seq;
}

void AsyncWork::on_completion(std::function<void()> f) {
  if (!work_) return;
  // The heartbeat rides in the same callback; a failed collective is not
  // recorded as finished.
  work_->on_completion([f = std::move(f), rec = recorder_, seq = seq_](bool ok) {
    if (rec && ok) rec->finished(seq);
    f();
  });
}

}  // namespace ddp::worker
