// DistributedDataParallel: buckets, gradient-accumulator hooks, overlap.
//
// Life of one synced backward:
//   1. The first hook that fires (autograd thread) starts the "backward
//      epoch" and queues finalize() with the engine, so it runs once when
//      this backward pass is over.
//   2. Each hook copies grad / world_size into its bucket's slice; when a
//      bucket has all its gradients, it and every earlier ready bucket start
//      their async allreduce. Buckets are launched strictly in index order on
//      every rank, because collectives must be issued in the same order
//      everywhere (the hooks' order can differ between ranks).
//   3. finalize() handles parameters that got no gradient, launches what is
//      left, waits for every bucket and copies the averages into .grad.

#include "ddp/worker/ddp.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/utils/tensor_flatten.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

namespace ddp::worker {

namespace {
constexpr size_t kMiB = 1024 * 1024;
// Python DDP broadcasts parameters and buffers in chunks of this size.
constexpr size_t kBroadcastChunkBytes = 250 * kMiB;

size_t bytes_of(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Broadcasts tensors from rank 0, coalesced per dtype into flat chunks, and
// copies the result back in place (the tensors may be parameters).
void broadcast_coalesced(ProcessGroup& pg, const std::vector<at::Tensor>& tensors) {
  if (pg.world_size() == 1 || tensors.empty()) return;
  at::NoGradGuard no_grad;
  std::vector<std::vector<at::Tensor>> chunks;
  std::map<c10::ScalarType, size_t> open;  // dtype -> index of its open chunk
  std::vector<size_t> chunk_bytes;
  for (const auto& t : tensors) {
    auto it = open.find(t.scalar_type());
    if (it == open.end() || chunk_bytes[it->second] + bytes_of(t) > kBroadcastChunkBytes) {
      chunks.emplace_back();
      chunk_bytes.push_back(0);
      open[t.scalar_type()] = chunks.size() - 1;
      it = open.find(t.scalar_type());
    }
    chunks[it->second].push_back(t);
    chunk_bytes[it->second] += bytes_of(t);
  }
  for (auto& chunk : chunks) {
    at::Tensor flat = torch::utils::flatten_dense_tensors(chunk);
    pg.broadcast(flat, 0);
    auto parts = torch::utils::unflatten_dense_tensors(flat, chunk);
    for (size_t i = 0; i < chunk.size(); ++i) chunk[i].copy_(parts[i]);
  }
}

std::string shape_text(const at::Tensor& t) {
  std::ostringstream o;
  o << t.sizes() << " " << t.dtype().name();
  return o.str();
}

}  // namespace

struct DistributedDataParallel::State : std::enable_shared_from_this<State> {
  struct Bucket {
    std::vector<size_t> params;   // indices into State::params
    std::vector<int64_t> offset;  // element offset of each in `flat`
    at::Tensor flat;
    size_t pending = 0;  // gradients not yet copied in this backward
    bool launched = false;
    AsyncWork work;
  };

  ProcessGroup* pg = nullptr;
  DDPOptions opt;
  std::vector<at::Tensor> params;  // parameters that require grad, registration order
  std::vector<std::string> names;
  std::vector<at::Tensor> buffers;
  std::vector<Bucket> buckets;
  std::vector<BucketInfo> info;
  std::vector<size_t> bucket_of;  // parameter -> bucket
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // keep hooks alive

  std::mutex mu;
  bool require_sync = true;
  bool in_backward = false;
  size_t next_bucket = 0;  // first bucket not launched yet
  std::vector<char> ready;
  std::vector<DDPEvent> events;

  void record(DDPEvent::Kind kind, size_t index) {
    if (opt.record_events) events.push_back({kind, index, std::chrono::steady_clock::now()});
  }

  void build_buckets() {
    // Reverse registration order approximates the order gradients become
    // ready (the last layers first). Per dtype, a bucket closes once it
    // reaches its limit: 1 MiB for the first, bucket_cap_mb afterwards
    // (Python's compute_bucket_assignment_by_size).
    struct Open {
      Bucket b;
      size_t bytes = 0;
      bool first = true;
    };
    std::map<std::string, Open> open;  // key: dtype and device
    std::vector<Bucket> done;
    std::vector<size_t> done_bytes;
    auto close = [&](Open& o) {
      if (o.b.params.empty()) return;
      done.push_back(std::move(o.b));
      done_bytes.push_back(o.bytes);
      o.b = Bucket();
      o.bytes = 0;
      o.first = false;
    };
    for (size_t k = params.size(); k-- > 0;) {
      const auto& p = params[k];
      auto& o = open[std::string(c10::toString(p.scalar_type())) + "@" + p.device().str()];
      o.b.params.push_back(k);
      o.bytes += bytes_of(p);
      const size_t limit = (o.first ? opt.first_bucket_mb : opt.bucket_cap_mb) * kMiB;
      if (o.bytes >= limit) close(o);
    }
    for (auto& [key, o] : open) close(o);
    buckets = std::move(done);
    bucket_of.assign(params.size(), 0);
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      auto& b = buckets[bi];
      int64_t n = 0;
      BucketInfo bi_info;
      for (size_t k : b.params) {
        b.offset.push_back(n);
        n += params[k].numel();
        bucket_of[k] = bi;
      }
      const auto& p0 = params[b.params.front()];
      b.flat = at::zeros({n}, p0.options().requires_grad(false));
      bi_info.parameter_indices = b.params;
      bi_info.numel = static_cast<size_t>(n);
      bi_info.bytes = done_bytes[bi];
      info.push_back(bi_info);
    }
    ready.assign(params.size(), 0);
  }

  void start_backward() {
    in_backward = true;
    next_bucket = 0;
    std::fill(ready.begin(), ready.end(), 0);
    for (auto& b : buckets) {
      b.pending = b.params.size();
      b.launched = false;
      b.work = AsyncWork();
    }
    // Runs once at the end of this backward pass, on the engine's thread.
    std::weak_ptr<State> weak = shared_from_this();
    torch::autograd::Engine::get_default_engine().queue_callback([weak] {
      if (auto s = weak.lock()) s->finalize();
    });
  }

  void copy_into_bucket(size_t k, const at::Tensor& grad) {
    auto& b = buckets[bucket_of[k]];
    const size_t pos = std::find(b.params.begin(), b.params.end(), k) - b.params.begin();
    at::Tensor slice = b.flat.narrow(0, b.offset[pos], params[k].numel());
    if (!grad.defined()) {
      slice.zero_();
      return;
    }
    if (grad.is_sparse())
      throw std::runtime_error("DistributedDataParallel: parameter '" + names[k] +
                               "' has a sparse gradient, which is not supported");
    slice.copy_(grad.reshape(-1));
    slice.div_(pg->world_size());
  }

  void mark_ready(size_t k) {
    ready[k] = 1;
    auto& b = buckets[bucket_of[k]];
    --b.pending;
    launch_ready_buckets();
  }

  void launch_ready_buckets() {
    while (next_bucket < buckets.size() && buckets[next_bucket].pending == 0) {
      auto& b = buckets[next_bucket];
      b.work = pg->allreduce_async(b.flat);
      b.launched = true;
      record(DDPEvent::Kind::BucketLaunched, next_bucket);
      ++next_bucket;
    }
  }

  void on_grad_ready(size_t k) {
    std::lock_guard<std::mutex> lock(mu);
    record(DDPEvent::Kind::GradReady, k);
    if (!require_sync) return;  // no_sync: .grad just accumulates locally
    if (!in_backward) start_backward();
    if (ready[k]) return;  // a second backward through the same graph in one pass
    at::NoGradGuard no_grad;
    copy_into_bucket(k, params[k].grad());
    mark_ready(k);
  }

  void wait_launched() {
    for (auto& b : buckets)
      if (b.launched) b.work.wait();
  }

  void finalize() {
    std::lock_guard<std::mutex> lock(mu);
    if (!in_backward) return;
    struct Reset {
      State& s;
      ~Reset() { s.in_backward = false; }
    } reset{*this};
    at::NoGradGuard no_grad;

    std::vector<size_t> missing;
    for (size_t k = 0; k < params.size(); ++k)
      if (!ready[k]) missing.push_back(k);
    if (!missing.empty() && !opt.find_unused_parameters) {
      // Every launched collective must complete before we report, or the
      // peers would be left waiting on a half-issued sequence.
      try {
        wait_launched();
      } catch (...) {
      }
      std::ostringstream m;
      m << "rank " << pg->rank() << ": DistributedDataParallel: " << missing.size()
        << " parameter(s) received no gradient in this backward pass, so their buckets could not be reduced: ";
      for (size_t i = 0; i < missing.size() && i < 10; ++i) m << (i ? ", " : "") << "'" << names[missing[i]] << "'";
      if (missing.size() > 10) m << ", ...";
      m << ". Make every parameter take part in the loss, set requires_grad=false on unused ones, "
           "or construct DDP with DDPOptions::find_unused_parameters = true.";
      throw std::runtime_error(m.str());
    }
    std::vector<char> locally_used(params.size(), 1);
    for (size_t k : missing) {
      locally_used[k] = 0;
      copy_into_bucket(k, at::Tensor());  // contributes zeros
      mark_ready(k);
    }
    at::Tensor globally_used;
    if (opt.find_unused_parameters) {
      // Like Python: one extra allreduce tells which parameters some rank
      // used; the others keep no gradient (optimizers then skip them).
      globally_used = at::empty({static_cast<int64_t>(params.size())},
                                at::TensorOptions().dtype(at::kInt).device(pg->device()));
      auto cpu = at::from_blob(locally_used.data(), {static_cast<int64_t>(params.size())}, at::kChar).to(at::kInt);
      globally_used.copy_(cpu);
      pg->allreduce(globally_used, ReduceOp::Sum);
      globally_used = globally_used.cpu();
    }
    wait_launched();
    const int32_t* used = globally_used.defined() ? globally_used.data_ptr<int32_t>() : nullptr;
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      auto& b = buckets[bi];
      for (size_t pos = 0; pos < b.params.size(); ++pos) {
        const size_t k = b.params[pos];
        if (used && used[k] == 0) continue;
        at::Tensor avg = b.flat.narrow(0, b.offset[pos], params[k].numel()).view(params[k].sizes());
        at::Tensor& g = params[k].mutable_grad();
        if (g.defined()) g.copy_(avg);
        else g = avg.clone();
      }
    }
    record(DDPEvent::Kind::BackwardFinished, 0);
  }
};

namespace {

struct GradReadyHook : torch::autograd::FunctionPostHook {
  GradReadyHook(std::weak_ptr<DistributedDataParallel::State> s, size_t k) : state(std::move(s)), index(k) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    // A destroyed DDP leaves its hooks behind as no-ops.
    if (auto s = state.lock()) s->on_grad_ready(index);
    return outputs;
  }
  std::weak_ptr<DistributedDataParallel::State> state;
  size_t index;
};

// Checks that every rank wraps the same parameters: compares (count, total
// elements, hash of shapes and dtypes) across ranks before anything is
// broadcast, so a mismatch is an error on every rank instead of a hang or a
// silent corruption.
void verify_shapes(ProcessGroup& pg, const std::vector<at::Tensor>& params,
                   const std::vector<std::string>& names) {
  int64_t numel = 0;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over sizes and dtypes
  auto mix = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const auto& p : params) {
    numel += p.numel();
    mix(p.dim());
    for (auto s : p.sizes()) mix(s);
    mix(static_cast<int64_t>(p.scalar_type()));
  }
  at::Tensor mine = at::tensor({static_cast<int64_t>(params.size()), numel, static_cast<int64_t>(h)},
                               at::TensorOptions().dtype(at::kLong))
                        .to(pg.device());
  auto all = pg.all_gather(mine);
  std::ostringstream diff;
  auto ref = all[0].cpu();
  for (int r = 1; r < pg.world_size(); ++r) {
    auto other = all[r].cpu();
    if (!at::equal(ref, other)) {
      diff << " rank " << r << " has " << other[0].item<int64_t>() << " parameters with "
           << other[1].item<int64_t>() << " elements, rank 0 has " << ref[0].item<int64_t>() << " with "
           << ref[1].item<int64_t>() << ";";
    }
  }
  if (!diff.str().empty()) {
    std::ostringstream m;
    m << "rank " << pg.rank()
      << ": DistributedDataParallel: the model's parameters differ across ranks (shapes or dtypes):" << diff.str()
      << " this rank's parameters:";
    for (size_t i = 0; i < params.size() && i < 20; ++i) m << " " << names[i] << " " << shape_text(params[i]) << ";";
    m << " Every rank must build the same model before wrapping it.";
    throw std::runtime_error(m.str());
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> pg, DDPOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), state_(std::make_shared<State>()) {
  if (!module_) throw std::invalid_argument("DistributedDataParallel: module is null");
  if (!pg_) throw std::invalid_argument("DistributedDataParallel: process group is null (call init_process_group first)");
  if (options.bucket_cap_mb == 0 || options.first_bucket_mb == 0)
    throw std::invalid_argument("DistributedDataParallel: bucket_cap_mb and first_bucket_mb must be >= 1");
  auto& s = *state_;
  s.pg = pg_.get();
  s.opt = options;
  std::vector<at::Tensor> all_params;
  std::vector<std::string> all_names;
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    if (p.device() != pg_->device())
      throw std::invalid_argument("DistributedDataParallel: parameter '" + item.key() + "' is on " + p.device().str() +
                                  " but the " + pg_->backend() + " process group works on " + pg_->device().str() +
                                  "; move the module with module->to(pg->device()) first");
    all_params.push_back(p);
    all_names.push_back(item.key());
    if (p.requires_grad()) {
      s.params.push_back(p);
      s.names.push_back(item.key());
    }
  }
  for (const auto& item : module_->named_buffers(/*recurse=*/true)) s.buffers.push_back(item.value());

  verify_shapes(*pg_, all_params, all_names);
  std::vector<at::Tensor> state_tensors = all_params;
  state_tensors.insert(state_tensors.end(), s.buffers.begin(), s.buffers.end());
  broadcast_coalesced(*pg_, state_tensors);

  s.build_buckets();
  for (size_t k = 0; k < s.params.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(s.params[k]);
    acc->add_post_hook(std::make_unique<GradReadyHook>(state_, k));
    s.accumulators.push_back(std::move(acc));
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::vector<at::Tensor> DistributedDataParallel::parameters() const { return module_->parameters(); }

void DistributedDataParallel::prepare_forward() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    // A backward that threw half-way leaves no state behind (finalize
    // resets), but a backward abandoned before its end callback could.
    state_->in_backward = false;
  }
  if (state_->opt.broadcast_buffers) broadcast_coalesced(*pg_, state_->buffers);
}

bool DistributedDataParallel::require_sync() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->require_sync;
}

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp) {
  std::lock_guard<std::mutex> lock(ddp_.state_->mu);
  previous_ = ddp_.state_->require_sync;
  ddp_.state_->require_sync = false;
}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() {
  std::lock_guard<std::mutex> lock(ddp_.state_->mu);
  ddp_.state_->require_sync = previous_;
}

const std::vector<BucketInfo>& DistributedDataParallel::buckets() const { return state_->info; }

std::vector<DDPEvent> DistributedDataParallel::events() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->events;
}

void DistributedDataParallel::clear_events() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->events.clear();
}

}  // namespace ddp::worker
