// Reducer: hooks, buckets and the end-of-backward protocol (see reducer.h).

#include "ddp/worker/reducer.h"
#include "ddp/worker/peer_failure.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>
#include <stdexcept>

namespace ddp::worker {

namespace {

struct GradReadyHook : torch::autograd::FunctionPostHook {
  GradReadyHook(std::weak_ptr<Reducer> r, size_t k) : reducer(std::move(r)), index(k) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto r = reducer.lock()) r->on_grad_ready(index);
    return outputs;
  }
  std::weak_ptr<Reducer> reducer;
  size_t index;
};

std::string quoted_list(const std::vector<std::string>& items, size_t max_items) {
  std::ostringstream o;
  for (size_t i = 0; i < items.size() && i < max_items; ++i) o << (i ? ", " : "") << "'" << items[i] << "'";
  if (items.size() > max_items) o << ", ... (" << items.size() << " in all)";
  return o.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream o;
  o << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) o << (i ? ", " : "") << ranks[i];
  if (ranks.size() > 16) o << ", ...";
  return o.str();
}

}  // namespace

std::shared_ptr<Reducer> Reducer::create(std::shared_ptr<ProcessGroup> pg, std::vector<at::Tensor> params,
                                         std::vector<std::string> names, const std::vector<AssignedBucket>& buckets,
                                         ReducerOptions options) {
  std::shared_ptr<Reducer> r(new Reducer(std::move(pg), std::move(params), std::move(names), buckets, options));
  r->install_hooks();  // needs shared_from_this
  return r;
}

Reducer::Reducer(std::shared_ptr<ProcessGroup> pg, std::vector<at::Tensor> params, std::vector<std::string> names,
                 const std::vector<AssignedBucket>& buckets, ReducerOptions options)
    : pg_(std::move(pg)), opt_(options), params_(std::move(params)), names_(std::move(names)) {
  bucket_of_.assign(params_.size(), kNoBucket);
  pos_in_bucket_.assign(params_.size(), 0);
  // The status rides in the last bucket on the CPU when its dtype holds the
  // sums exactly (every value is at most world * P).
  const int64_t P = static_cast<int64_t>(params_.size()), W = pg_->world_size();
  if (!buckets.empty() && pg_->device().is_cpu()) {
    const auto dtype = params_.at(buckets.back().params.front()).scalar_type();
    const double exact = dtype == at::kFloat ? 16777216.0 : dtype == at::kDouble ? 9007199254740992.0 : 0;
    if (static_cast<double>(W) * static_cast<double>(P + 1) < exact) status_in_bucket_ = static_cast<size_t>(P + 2 * W);
  }
  // Each bucket's layout first, then its memory: on one machine all buckets
  // live in shared memory, where the ranks sum them in place
  // (ProcessGroup::shared_buffers; empty: private memory).
  std::vector<std::pair<int64_t, at::ScalarType>> sizes;  // elements (the status tail included), dtype
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    Bucket b;
    int64_t n = 0;
    for (size_t pos = 0; pos < buckets[bi].params.size(); ++pos) {
      const size_t k = buckets[bi].params.at(pos);
      b.params.push_back(k);
      b.offset.push_back(n);
      n += params_.at(k).numel();
      bucket_of_[k] = bi;
      pos_in_bucket_[k] = pos;
    }
    b.grad_numel = n;
    const int64_t tail = bi + 1 == buckets.size() ? static_cast<int64_t>(status_in_bucket_) : 0;
    sizes.emplace_back(n + tail, params_.at(b.params.front()).scalar_type());
    buckets_.push_back(std::move(b));
    info_.push_back({buckets[bi].params, static_cast<size_t>(n), buckets[bi].bytes});
  }
  const std::vector<at::Tensor> memory = bucket_memory(sizes);
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = buckets_[bi];
    b.flat = memory[bi];
    // Aliases made with set_ rather than narrow().view(): an autograd view
    // as .grad would make Optimizer::zero_grad's detach_() throw.
    at::NoGradGuard no_grad;
    for (size_t pos = 0; pos < b.params.size(); ++pos) {
      const at::Tensor& p = params_[b.params[pos]];
      at::Tensor v = at::empty({0}, b.flat.options());
      v.set_(b.flat.storage(), b.flat.storage_offset() + b.offset[pos], p.sizes(), c10::contiguous_strides(p.sizes()));
      b.views.push_back(std::move(v));
    }
  }
  ready_.assign(params_.size(), 0);
  missing_.assign(params_.size(), 0);
  used_.assign(params_.size(), 0);
}

std::vector<at::Tensor> Reducer::bucket_memory(const std::vector<std::pair<int64_t, at::ScalarType>>& sizes) const {
  if (sizes.empty()) return {};  // nothing to reduce (every parameter frozen)
  std::string why;
  std::vector<at::Tensor> memory = pg_->shared_buffers(sizes, &why);
  if (!memory.empty()) return memory;
  const bool summed_there =
      std::all_of(sizes.begin(), sizes.end(), [&](const auto& s) { return pg_->shared_memory_sums(s.second); });
  if (summed_there && pg_->rank() == 0)
    std::cerr << "ddp_worker: note: DDP's gradient buckets stay in private memory: " << why
              << "; each sum through shared memory then copies them in and out (more room in /dev/shm, "
                 "a container's is often 64 MiB: docker run --shm-size, lets the ranks sum them in place)"
              << std::endl;
  for (size_t bi = 0; bi < buckets_.size(); ++bi)
    memory.push_back(at::zeros({sizes[bi].first}, params_.at(buckets_[bi].params.front()).options().requires_grad(false)));
  return memory;
}

void Reducer::install_hooks() {
  for (size_t k = 0; k < params_.size(); ++k) {
    if (bucket_of_[k] == kNoBucket) continue;
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    acc->add_post_hook(std::make_unique<GradReadyHook>(weak_from_this(), k));
    accumulators_.push_back(std::move(acc));
  }
}

std::string Reducer::error_prefix() const {
  return "rank " + std::to_string(pg_->rank()) + ": DistributedDataParallel: ";
}

void Reducer::record(DDPEvent::Kind kind, size_t index) {
  if (!opt_.record_events) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(events_mu_);
  events_.push_back({kind, index, now});
}

std::vector<DDPEvent> Reducer::events() const {
  std::lock_guard<std::mutex> lock(events_mu_);
  return events_;
}

void Reducer::clear_events() {
  std::lock_guard<std::mutex> lock(events_mu_);
  events_.clear();
}

// ---- data movement -----------------------------------------------------------

const at::Tensor& Reducer::bucket_view(size_t k) const {
  return buckets_[bucket_of_[k]].views[pos_in_bucket_[k]];
}

// .grad is this parameter's bucket slice itself (same memory and layout).
bool Reducer::grad_is_view(size_t k) const {
  const at::Tensor& grad = params_[k].grad();
  const at::Tensor& view = bucket_view(k);
  return grad.defined() && !grad.is_sparse() && grad.data_ptr() == view.data_ptr() &&
         grad.sizes() == view.sizes() && grad.strides() == view.strides();
}

// Makes the bucket slice hold this parameter's .grad (zeros when it has
// none); with views, .grad is the slice afterwards.
void Reducer::copy_grad_in(size_t k) {
  const at::Tensor& view = bucket_view(k);
  const at::Tensor& grad = params_[k].grad();
  if (!grad.defined()) {
    view.zero_();
    return;
  }
  if (grad.is_sparse())
    throw std::runtime_error(error_prefix() + "parameter '" + names_[k] +
                             "' has a sparse gradient, which is not supported (construct its module without "
                             "sparse gradients, e.g. Embedding without sparse(true))");
  if (grad_is_view(k)) return;  // autograd accumulated into the bucket
  view.copy_(grad);
  if (opt_.gradient_as_bucket_view) params_[k].mutable_grad() = view;
}

// After a successful reduction: .grad holds the average.
void Reducer::copy_result_out(size_t k) {
  const at::Tensor& avg = bucket_view(k);
  at::Tensor& g = params_[k].mutable_grad();
  if (opt_.gradient_as_bucket_view) {
    if (!grad_is_view(k)) g = avg;
  } else if (g.defined()) {
    g.copy_(avg);
  } else {
    g = avg.clone();
  }
}

std::string Reducer::grad_state_after_error() const {
  return opt_.gradient_as_bucket_view
             ? ".grad is not usable in this step, since it shares memory with the buckets, which hold partial sums: "
               "zero it before the next step"
             : ".grad holds this rank's local gradients";
}

// ---- one backward --------------------------------------------------------------

void Reducer::prepare_forward(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_backward_) abandon("the previous backward pass failed on this rank after gradients started to arrive");
  if (!at::GradMode::is_enabled()) return;  // no backward will follow this forward
  mode_ = sync ? Mode::Sync : Mode::Accumulate;
}

void Reducer::on_grad_ready(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (mode_ == Mode::Off) return;
  // Like Python, only a defined gradient counts as use (hooks can fire with
  // none when an output took no part in the loss).
  if (params_[k].grad().defined()) used_[k] = 1;
  if (mode_ == Mode::Accumulate) return;  // no_sync: .grad accumulates locally
  record(DDPEvent::Kind::GradReady, k);
  if (!in_backward_) start_backward();
  if (ready_[k]) return;  // fired twice in one pass
  try {
    at::NoGradGuard no_grad;
    copy_grad_in(k);
    mark_ready(k);
  } catch (const std::exception& e) {
    // This exception ends the backward pass here; finish the protocol as a
    // failed rank first, so the peers are released and stay in step.
    abandon(e.what());
    throw;
  }
}

void Reducer::start_backward() {
  in_backward_ = true;
  next_bucket_ = 0;
  std::fill(ready_.begin(), ready_.end(), 0);
  std::fill(missing_.begin(), missing_.end(), 0);
  missing_count_ = 0;
  failed_here_ = false;
  for (auto& b : buckets_) {
    b.pending = b.params.size();
    b.launched = false;
    b.work = AsyncWork();
  }
  // Runs once at the end of this backward pass, on the engine's thread (not
  // at all when the pass throws: then prepare_forward or a hook finishes it).
  std::weak_ptr<Reducer> weak = weak_from_this();
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto r = weak.lock()) r->finalize();
  });
}

void Reducer::mark_ready(size_t k) {
  ready_[k] = 1;
  --buckets_[bucket_of_[k]].pending;
  launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    auto& b = buckets_[next_bucket_];
    // The gradients are averaged (the status tail summed) by the allreduce:
    // through shared memory in its own pass over the bucket, not one more.
    if (status_in_bucket_ && next_bucket_ + 1 == buckets_.size()) write_status_tail();
    b.work = pg_->allreduce_async(b.flat, b.grad_numel);
    b.launched = true;
    record(DDPEvent::Kind::BucketLaunched, next_bucket_);
    if (opt_.record_events) {
      std::weak_ptr<Reducer> weak = weak_from_this();
      const size_t index = next_bucket_;
      b.work.on_completion([weak, index] {
        if (auto r = weak.lock()) r->record(DDPEvent::Kind::BucketReduced, index);
      });
    }
    ++next_bucket_;
  }
}

std::vector<int64_t> Reducer::local_status() const {
  const size_t P = params_.size(), W = static_cast<size_t>(pg_->world_size()), rank = static_cast<size_t>(pg_->rank());
  std::vector<int64_t> st(P + 2 * W, 0);
  for (size_t k = 0; k < P; ++k) st[k] = opt_.find_unused_parameters ? used_[k] : missing_[k];
  st[P + rank] = failed_here_ ? 1 : 0;
  st[P + W + rank] = missing_count_;
  return st;
}

void Reducer::write_status_tail() {
  auto& last = buckets_.back();
  const auto st = local_status();
  at::Tensor tail = last.flat.narrow(0, last.grad_numel, static_cast<int64_t>(status_in_bucket_));
  tail.copy_(at::tensor(st, at::TensorOptions().dtype(at::kLong)));
}

void Reducer::finalize() {
  record(DDPEvent::Kind::BackwardComputed, 0);
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_backward_) return;
  finish(false, "");
}

void Reducer::abandon(const std::string& why) noexcept {
  try {
    finish(true, why);
  } catch (...) {
    // This rank already reports its own error (or the peers' one follows).
  }
}

void Reducer::finish(bool failed_here, std::string local_error) {
  // Disarmed whatever the outcome: the next backward starts afresh. Not a
  // scope guard: GCC 12.2 at -O3 drops the stores of a local guard's
  // destructor on the exception path when it also clears a vector (dead-store
  // elimination; reproduced in isolation), which left this rank "in backward"
  // after an error.
  try {
    decide(failed_here, std::move(local_error));
  } catch (...) {
    disarm();
    throw;
  }
  disarm();
}

void Reducer::disarm() {
  in_backward_ = false;
  mode_ = Mode::Off;
  std::fill(used_.begin(), used_.end(), 0);
}

void Reducer::decide(bool failed_here, std::string local_error) {
  at::NoGradGuard no_grad;
  const int world = pg_->world_size();
  const size_t P = params_.size();

  // 2a. Complete every bucket. A parameter without a gradient in this pass
  // contributes its .grad (the micro-batches it took part in under no_sync,
  // as in Python), or zeros.
  failed_here_ = failed_here;
  // A parameter this rank did not use may turn out unused on every rank;
  // then its .grad must stay as it was, but filling the bucket can make .grad
  // the bucket view and the allreduce overwrites the view: keep the tensor,
  // and the values of a view.
  struct Kept {
    size_t k;
    at::Tensor grad, values;
  };
  std::vector<Kept> kept;
  for (size_t k = 0; k < P; ++k) {
    if (bucket_of_[k] == kNoBucket || ready_[k]) continue;
    missing_[k] = 1;
    ++missing_count_;
    if (opt_.find_unused_parameters && !used_[k])
      kept.push_back({k, params_[k].grad(), grad_is_view(k) ? bucket_view(k).clone() : at::Tensor()});
    try {
      if (failed_here_) bucket_view(k).zero_();
      else copy_grad_in(k);
    } catch (const std::exception& e) {
      bucket_view(k).zero_();
      failed_here_ = true;
      if (local_error.empty()) local_error = e.what();
    }
    ready_[k] = 1;
    --buckets_[bucket_of_[k]].pending;
  }
  // The first communication error, rethrown as it is: a PeerFailure keeps
  // the rank it follows (a sum through shared memory knows which peer died).
  std::exception_ptr comm_error;
  try {
    launch_ready_buckets();
  } catch (const std::exception&) {
    comm_error = std::current_exception();  // this rank cannot complete the sequence; its peers see it fail
  }

  // 2b. The status every rank decides from (summed over ranks):
  // [0, P): ranks that missed parameter k (or used it, with find_unused);
  // [P + r]: rank r failed; [P + W + r]: parameters rank r missed. Already
  // on its way in the last bucket's tail, or an allreduce of its own.
  at::Tensor status;
  AsyncWork status_work;
  if (!comm_error && !status_in_bucket_) {
    const auto st = local_status();
    status = at::empty({static_cast<int64_t>(st.size())}, at::TensorOptions().dtype(at::kLong));
    std::memcpy(status.data_ptr<int64_t>(), st.data(), st.size() * sizeof(int64_t));
    try {
      // On the host even with NCCL: deciding never waits for the GPU; the
      // bucket waits below are stream waits there.
      status_work = pg_->host_allreduce_async(status);
    } catch (const std::exception&) {
      comm_error = std::current_exception();
    }
  }

  // 3. Wait for everything issued, then decide.
  auto wait = [&](AsyncWork& w) {
    try {
      w.wait();
    } catch (const std::exception&) {
      if (!comm_error) comm_error = std::current_exception();
    }
  };
  wait(status_work);
  for (auto& b : buckets_)
    if (b.launched) wait(b.work);
  if (comm_error) std::rethrow_exception(comm_error);
  if (status_in_bucket_) {
    const auto& last = buckets_.back();
    status = last.flat.narrow(0, last.grad_numel, static_cast<int64_t>(status_in_bucket_)).round().to(at::kLong);
  }
  const int64_t* s = status.data_ptr<int64_t>();

  std::vector<int> failed_ranks, missing_ranks;
  for (int r = 0; r < world; ++r) {
    if (s[P + r] > 0) failed_ranks.push_back(r);
    if (s[P + world + r] > 0) missing_ranks.push_back(r);
  }
  if (!failed_ranks.empty()) {
    if (failed_here_ && !local_error.empty()) throw std::runtime_error(local_error);
    // Not this rank's failure: marked, so the launcher's report names the rank it follows.
    throw PeerFailure(failed_ranks.front(), error_prefix() + "the backward pass failed on " + rank_list(failed_ranks) +
                             " (see that rank's error), so no gradient was reduced in this step and " +
                             grad_state_after_error() +
                             ". Every rank raises this error at the same step, so the ranks stay in step if they "
                             "catch it.");
  }
  if (!missing_ranks.empty() && !opt_.find_unused_parameters) {
    std::vector<std::string> names;
    for (size_t k = 0; k < P; ++k)
      if (s[k] > 0) names.push_back(names_[k]);
    std::ostringstream m;
    m << error_prefix();
    if (missing_count_ > 0) {
      m << missing_count_ << " parameter(s) received no gradient in this backward pass on this rank: ";
      std::vector<std::string> mine;
      for (size_t k = 0; k < P; ++k)
        if (missing_[k]) mine.push_back(names_[k]);
      m << quoted_list(mine, 10) << " (missing on " << rank_list(missing_ranks) << ")";
    } else {
      m << "parameter(s) " << quoted_list(names, 10) << " received no gradient in this backward pass on "
        << rank_list(missing_ranks);
    }
    m << ", so their buckets could not be reduced and no gradient was reduced in this step (" << grad_state_after_error()
      << "). Make every parameter take part in the loss on every rank, set requires_grad=false on unused ones, or "
         "construct DDP with DDPOptions::find_unused_parameters = true.";
    throw std::runtime_error(m.str());
  }
  // A parameter no rank used keeps its .grad as it is (Python leaves it
  // alone too, so optimizers skip a parameter without a gradient).
  for (size_t k = 0; k < P; ++k) {
    if (bucket_of_[k] == kNoBucket) continue;
    if (opt_.find_unused_parameters && s[k] == 0) continue;
    copy_result_out(k);
  }
  for (auto& kp : kept) {
    if (s[kp.k] != 0) continue;
    params_[kp.k].mutable_grad() = kp.grad;
    if (kp.values.defined()) kp.grad.copy_(kp.values);
  }
  record(DDPEvent::Kind::BackwardFinished, 0);
}

}  // namespace ddp::worker
