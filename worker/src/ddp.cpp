// DistributedDataParallel: construction (parameter check across ranks,
// broadcast from rank 0, bucket assignment), forward arming and no_sync.
// The gradient synchronisation itself is the Reducer's (reducer.cpp).

#include "ddp/worker/ddp.h"

#include <torch/csrc/utils/tensor_flatten.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "ddp/worker/bucket_assignment.h"
#include "ddp/worker/reducer.h"
#include "tensor_bytes.h"

namespace ddp::worker {

namespace {
constexpr size_t kMiB = 1024 * 1024;
// Python DDP broadcasts parameters and buffers in chunks of this size.
constexpr size_t kBroadcastChunkBytes = 250 * kMiB;

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
    if (it == open.end() || chunk_bytes[it->second] + tensor_bytes(t) > kBroadcastChunkBytes) {
      chunks.emplace_back();
      chunk_bytes.push_back(0);
      open[t.scalar_type()] = chunks.size() - 1;
      it = open.find(t.scalar_type());
    }
    chunks[it->second].push_back(t);
    chunk_bytes[it->second] += tensor_bytes(t);
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

// Checks that every rank wraps the same parameters: compares (count,
// elements, hash of shapes and dtypes) of all parameters, and the same of
// those that require grad (which the buckets hold), across ranks before
// anything is broadcast, so a mismatch is an error on every rank instead of
// a hang or mismatched buckets.
void verify_parameters(ProcessGroup& pg, const std::vector<at::Tensor>& params,
                       const std::vector<std::string>& names) {
  struct Summary {
    int64_t count = 0, numel = 0;
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over sizes and dtypes
    void add(const at::Tensor& p) {
      ++count;
      numel += p.numel();
      mix(p.dim());
      for (auto s : p.sizes()) mix(s);
      mix(static_cast<int64_t>(p.scalar_type()));
    }
    void mix(int64_t v) {
      for (int i = 0; i < 8; ++i) {
        hash ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
        hash *= 1099511628211ull;
      }
    }
  } all, trained;
  for (const auto& p : params) {
    all.add(p);
    if (p.requires_grad()) trained.add(p);
  }
  at::Tensor mine = at::tensor({all.count, all.numel, static_cast<int64_t>(all.hash), trained.count, trained.numel,
                                static_cast<int64_t>(trained.hash)},
                               at::TensorOptions().dtype(at::kLong))
                        .to(pg.device());
  auto gathered = pg.all_gather(mine);
  std::vector<at::Tensor> all_ranks;
  for (auto& t : gathered) all_ranks.push_back(t.cpu());
  const auto& ref = all_ranks[0];
  std::ostringstream shapes, trainable;
  for (int r = 1; r < pg.world_size(); ++r) {
    const auto& other = all_ranks[r];
    auto v = [](const at::Tensor& t, int i) { return t[i].item<int64_t>(); };
    if (!at::equal(ref.narrow(0, 0, 3), other.narrow(0, 0, 3))) {
      shapes << " rank " << r << " has " << v(other, 0) << " parameters with " << v(other, 1)
             << " elements, rank 0 has " << v(ref, 0) << " with " << v(ref, 1) << ";";
    } else if (!at::equal(ref.narrow(0, 3, 3), other.narrow(0, 3, 3))) {
      trainable << " rank " << r << " has " << v(other, 3) << " with " << v(other, 4) << " elements, rank 0 has "
                << v(ref, 3) << " with " << v(ref, 4) << ";";
    }
  }
  if (shapes.str().empty() && trainable.str().empty()) return;
  std::ostringstream m;
  m << "rank " << pg.rank() << ": DistributedDataParallel: ";
  if (!shapes.str().empty()) {
    m << "the model's parameters differ across ranks (shapes or dtypes):" << shapes.str()
      << " this rank's parameters:";
    for (size_t i = 0; i < params.size() && i < 20; ++i) m << " " << names[i] << " " << shape_text(params[i]) << ";";
    m << " Every rank must build the same model before wrapping it.";
  } else {
    m << "the parameters that require grad differ across ranks (requires_grad):" << trainable.str()
      << " this rank's frozen parameters:";
    int frozen = 0;
    for (size_t i = 0; i < params.size(); ++i)
      if (!params[i].requires_grad() && frozen++ < 20) m << " " << names[i] << ";";
    if (frozen == 0) m << " none;";
    m << " Every rank must freeze the same parameters (requires_grad=false) before wrapping the model.";
  }
  throw std::runtime_error(m.str());
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> pg, DDPOptions options)
    : module_(std::move(module)), pg_(std::move(pg)), options_(options) {
  if (!module_) throw std::invalid_argument("DistributedDataParallel: module is null");
  if (!pg_) throw std::invalid_argument("DistributedDataParallel: process group is null (call init_process_group first)");
  const double cap_mb = options.bucket_cap_mb.value_or(25);
  const double first_mb = options.first_bucket_mb.value_or(pg_->device().is_cuda() ? 1.0 : cap_mb);
  for (auto [name, mb] : {std::pair{"bucket_cap_mb", cap_mb}, {"first_bucket_mb", first_mb}})
    if (!(mb > 0 && mb <= 1024 * 1024))  // also rejects NaN
      throw std::invalid_argument("DistributedDataParallel: " + std::string(name) + " = " + std::to_string(mb) +
                                  " is not a bucket size; give MiB in (0, 1048576], e.g. 25");
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    if (p.device() != pg_->device())
      throw std::invalid_argument("DistributedDataParallel: parameter '" + item.key() + "' is on " + p.device().str() +
                                  " but the " + pg_->backend() + " process group works on " + pg_->device().str() +
                                  "; move the module with module->to(pg->device()) first");
    params.push_back(p);
    names.push_back(item.key());
  }
  for (const auto& item : module_->named_buffers(/*recurse=*/true)) buffers_.push_back(item.value());

  verify_parameters(*pg_, params, names);
  std::vector<at::Tensor> state_tensors = params;
  state_tensors.insert(state_tensors.end(), buffers_.begin(), buffers_.end());
  broadcast_coalesced(*pg_, state_tensors);

  std::vector<ParamSpec> specs;
  for (const auto& p : params)
    specs.push_back({tensor_bytes(p), std::string(c10::toString(p.scalar_type())) + "@" + p.device().str(),
                     p.requires_grad()});
  auto bytes = [](double mb) { return std::max<size_t>(1, static_cast<size_t>(mb * kMiB)); };
  auto buckets = compute_bucket_assignment(specs, {bytes(first_mb), bytes(cap_mb)});
  reducer_ = Reducer::create(pg_, std::move(params), std::move(names), buckets,
                             {options.find_unused_parameters, options.gradient_as_bucket_view, options.record_events});
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::vector<at::Tensor> DistributedDataParallel::parameters() const { return module_->parameters(); }

void DistributedDataParallel::prepare_forward() {
  reducer_->prepare_forward(require_sync_.load());
  if (options_.broadcast_buffers) broadcast_coalesced(*pg_, buffers_);
}

bool DistributedDataParallel::require_sync() const { return require_sync_.load(); }

DistributedDataParallel::NoSyncGuard::NoSyncGuard(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.require_sync_.exchange(false)) {}

DistributedDataParallel::NoSyncGuard::~NoSyncGuard() { ddp_.require_sync_.store(previous_); }

const std::vector<BucketInfo>& DistributedDataParallel::buckets() const { return reducer_->bucket_info(); }

std::vector<DDPEvent> DistributedDataParallel::events() const { return reducer_->events(); }

void DistributedDataParallel::clear_events() { reducer_->clear_events(); }

}  // namespace ddp::worker
