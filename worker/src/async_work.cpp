// AsyncWork: one collective in flight, over a c10d backend's Work or a
// collective of the runtime's own thread (see process_group.h), and its two
// makers (async_work.h).

#include "async_work.h"

#include <memory>
#include <stdexcept>
#include <utility>

#include "ddp/worker/peer_failure.h"
#include "error_text.h"
#include "heartbeat_recorder.h"
#include "local_work.h"

namespace ddp::worker {

AsyncWork make_work(c10::intrusive_ptr<compat::Work> w, std::string what, int rank) {
  return AsyncWork(std::make_shared<c10::intrusive_ptr<compat::Work>>(std::move(w)), std::move(what), rank);
}

AsyncWork done_at_once(std::string what, int rank) {
  auto w = std::make_shared<LocalWork>();
  w->finish(nullptr);
  return AsyncWork(std::move(w), std::move(what), rank);
}

AsyncWork::AsyncWork(std::shared_ptr<void> work, std::string what, int rank)
    : work_(std::move(work)), what_(std::move(what)), rank_(rank) {}

AsyncWork::AsyncWork(std::shared_ptr<LocalWork> work, std::string what, int rank)
    : local_(std::move(work)), what_(std::move(what)), rank_(rank) {}

void AsyncWork::wait() {
  if (!work_ && !local_) return;
  try {
    const uint64_t waiting_since = recorder_ ? monotonic_ns() : 0;
    if (local_) {
      local_->wait();
    } else {
      auto& w = *static_cast<c10::intrusive_ptr<compat::Work>*>(work_.get());
      w->wait();
      if (after_) (*static_cast<c10::intrusive_ptr<c10::ivalue::Future>*>(after_.get()))->wait();
    }
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

bool AsyncWork::completed() const {
  if (local_) return local_->completed();
  if (!work_) return true;
  return (*static_cast<c10::intrusive_ptr<compat::Work>*>(work_.get()))->isCompleted();
}

void AsyncWork::record_finish(std::shared_ptr<CollectiveRecorder> recorder, std::uint64_t seq) {
  recorder_ = std::move(recorder);
  seq_ = seq;
}

void AsyncWork::on_completion(std::function<void()> f) {
  if (local_) {
    if (recorder_)
      // LocalWork::finish sets the error before it runs the callbacks, on this thread.
      local_->on_completion([f = std::move(f), rec = recorder_, seq = seq_, w = local_.get()] {
        if (!w->error) rec->finished(seq);
        f();
      });
    else
      local_->on_completion(std::move(f));
    return;
  }
  if (!work_) return;
  auto& w = *static_cast<c10::intrusive_ptr<compat::Work>*>(work_.get());
  c10::intrusive_ptr<c10::ivalue::Future> future;
  try {
    future = w->getFuture();
  } catch (const std::exception&) {
    return;  // this backend's work has no future: no completion time
  }
  // The heartbeat rides in the same callback (a failed collective calls it
  // too, with an error in the future: not recorded as finished).
  auto then = future->then(
      [f = std::move(f), rec = recorder_, seq = seq_](c10::ivalue::Future& done) {
        if (rec && !done.hasError()) rec->finished(seq);
        f();
        return c10::IValue();
      },
      c10::NoneType::get());
  after_ = std::make_shared<c10::intrusive_ptr<c10::ivalue::Future>>(std::move(then));
}

}  // namespace ddp::worker
