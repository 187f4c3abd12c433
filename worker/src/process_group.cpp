// The ProcessGroup wrapper over a c10d backend: its collectives, each
// checked, recorded in the heartbeat and routed to shared memory or the
// backend. The group is made by the rendezvous (env_rendezvous.cpp); its
// AsyncWork lives in async_work.cpp.

#include "ddp/worker/process_group.h"

#include <sstream>
#include <stdexcept>

#include "ddp/worker/compat.h"
#include "ddp/worker/process_group_native.h"
#include "ddp/worker/training_step.h"
#include "async_work.h"
#include "make_process_group.h"
#include "process_group_impl.h"
#include "tensor_bytes.h"

namespace ddp::worker {

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return impl_->env.rank; }
int ProcessGroup::world_size() const { return impl_->env.world_size; }
int ProcessGroup::local_rank() const { return impl_->env.local_rank; }
int ProcessGroup::local_world_size() const { return impl_->env.local_world_size; }
c10::Device ProcessGroup::device() const { return impl_->device; }
const std::string& ProcessGroup::backend() const { return impl_->backend_name; }
std::chrono::milliseconds ProcessGroup::timeout() const { return impl_->timeout; }
const DistEnv& ProcessGroup::env() const { return impl_->env; }
bool ProcessGroup::shared_memory_allreduce() const { return impl_->shm != nullptr; }
const std::string& ProcessGroup::shared_memory_off_reason() const { return impl_->shm_off_reason; }
bool ProcessGroup::shared_memory_sums(at::ScalarType dtype) const {
  return impl_->shm != nullptr && ShmAllreduce::sums(dtype);
}

std::vector<at::Tensor> ProcessGroup::shared_buffers(const std::vector<std::pair<int64_t, at::ScalarType>>& sizes,
                                                     std::string* why) {
  auto none = [&](const std::string& reason) {
    if (why) *why = reason;
    return std::vector<at::Tensor>{};
  };
  if (!impl_->shm) return none("sums do not go through shared memory: " + impl_->shm_off_reason);
  std::vector<ShmAllreduce::BufferSpec> specs;
  for (const auto& [numel, dtype] : sizes) specs.push_back({numel, dtype});
  return impl_->shm->shared_buffers(*impl_->store, specs, why);
}

c10::intrusive_ptr<compat::Backend> native_backend(ProcessGroup& pg) { return ProcessGroupAccess::impl(pg).backend; }
c10::intrusive_ptr<c10d::Store> native_store(ProcessGroup& pg) { return ProcessGroupAccess::impl(pg).store; }

void training_step(ProcessGroup& pg, std::uint64_t step) {
  const auto& heartbeat = ProcessGroupAccess::impl(pg).heartbeat;
  if (heartbeat) heartbeat->step(step);
}

namespace {

std::string describe(const char* op, const at::Tensor& t) {
  std::ostringstream o;
  o << op << " of " << t.numel() << " x " << t.dtype().name() << " on " << t.device();
  return o.str();
}

void check_tensor(const ProcessGroup& pg, const at::Tensor& t, const char* op) {
  if (!t.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
  if (t.is_sparse()) throw std::invalid_argument(std::string(op) + ": sparse tensors are not supported");
  if (t.device() != pg.device())
    throw std::invalid_argument(describe(op, t) + ": the " + pg.backend() + " process group needs tensors on " +
                                pg.device().str());
}

// The heartbeat around one collective: entered before `issue` runs (issuing
// may itself block, as NCCL's first collective does), its end recorded by the
// AsyncWork `issue` returns. Without a heartbeat: only `issue`.
template <class Issue>
AsyncWork recorded(ProcessGroup::Impl& impl, CollectiveKind kind, uint64_t bytes, Issue&& issue) {
  if (!impl.heartbeat) return issue();
  const uint64_t seq = impl.heartbeat->started(kind, bytes);
  AsyncWork w = issue();
  w.record_finish(impl.heartbeat, seq);
  return w;
}

void check_root(const ProcessGroup& pg, int root) {
  if (root < 0 || root >= pg.world_size())
    throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is not a rank of a group of " +
                                std::to_string(pg.world_size()));
}

}  // namespace

AsyncWork ProcessGroup::allreduce_async(at::Tensor& tensor, int64_t averaged) {
  check_tensor(*this, tensor, "allreduce");
  if (!tensor.is_contiguous()) throw std::invalid_argument(describe("allreduce", tensor) + ": tensor must be contiguous");
  if (averaged < 0 || averaged > tensor.numel())
    throw std::invalid_argument(describe("allreduce", tensor) + ": cannot average its first " +
                                std::to_string(averaged) + " elements");
  if (world_size() == 1) return done_at_once(describe("allreduce", tensor), rank());
  return recorded(*impl_, CollectiveKind::Allreduce, tensor_bytes(tensor), [&] {
    if (impl_->shm && ShmAllreduce::serves(tensor))
      return AsyncWork(impl_->shm->allreduce_async(tensor, static_cast<size_t>(averaged)),
                       describe("shared-memory allreduce", tensor), rank());
    if (averaged > 0) tensor.view(-1).narrow(0, 0, averaged).div_(world_size());
    std::vector<at::Tensor> v{tensor};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    return make_work(impl_->backend->allreduce(v, o), describe("allreduce", tensor), rank());
  });
}

AsyncWork ProcessGroup::host_allreduce_async(at::Tensor& cpu_tensor) {
  if (!cpu_tensor.defined() || !cpu_tensor.device().is_cpu() || !cpu_tensor.is_contiguous())
    throw std::invalid_argument("host allreduce needs a contiguous CPU tensor");
  if (world_size() == 1) return done_at_once(describe("host allreduce", cpu_tensor), rank());
  std::call_once(impl_->host_once, [this] {
    if (impl_->backend_name == "gloo") {
      impl_->host_backend = impl_->backend;
    } else {
      auto store = c10::make_intrusive<c10d::PrefixStore>("ddp_host/", impl_->store);
      impl_->host_backend = make_gloo(store, impl_->env, impl_->timeout);
    }
  });
  return recorded(*impl_, CollectiveKind::Allreduce, tensor_bytes(cpu_tensor), [&] {
    std::vector<at::Tensor> v{cpu_tensor};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    return make_work(impl_->host_backend->allreduce(v, o), describe("host allreduce", cpu_tensor), rank());
  });
}

AsyncWork ProcessGroup::broadcast_async(at::Tensor& tensor, int root) {
  check_tensor(*this, tensor, "broadcast");
  if (!tensor.is_contiguous()) throw std::invalid_argument(describe("broadcast", tensor) + ": tensor must be contiguous");
  check_root(*this, root);
  if (world_size() == 1) return done_at_once(describe("broadcast", tensor), rank());
  return recorded(*impl_, CollectiveKind::Broadcast, tensor_bytes(tensor), [&] {
    std::vector<at::Tensor> v{tensor};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    return make_work(impl_->backend->broadcast(v, o), describe("broadcast", tensor), rank());
  });
}

void ProcessGroup::allreduce(at::Tensor& tensor, ReduceOp op) {
  check_tensor(*this, tensor, "allreduce");
  if (world_size() == 1) return;  // every op of one value is that value
  // Gloo and NCCL want contiguous buffers; reduce a copy and write it back.
  at::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
  std::vector<at::Tensor> v{buf};
  c10d::AllreduceOptions o;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean: o.reduceOp = c10d::ReduceOp::SUM; break;  // Gloo has no AVG
    case ReduceOp::Max: o.reduceOp = c10d::ReduceOp::MAX; break;
    case ReduceOp::Min: o.reduceOp = c10d::ReduceOp::MIN; break;
  }
  recorded(*impl_, CollectiveKind::Allreduce, tensor_bytes(buf), [&] {
    if (impl_->shm && (op == ReduceOp::Sum || op == ReduceOp::Mean) && ShmAllreduce::serves(buf))
      return AsyncWork(impl_->shm->allreduce_async(buf), describe("shared-memory allreduce", tensor), rank());
    return make_work(impl_->backend->allreduce(v, o), describe("allreduce", tensor), rank());
  }).wait();
  if (op == ReduceOp::Mean) {
    if (buf.is_floating_point() || buf.is_complex()) buf.div_(world_size());
    else buf.div_(world_size(), "floor");
  }
  if (!buf.is_same(tensor)) tensor.copy_(buf);
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  check_root(*this, root);
  at::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
  broadcast_async(buf, root).wait();
  if (!buf.is_same(tensor)) tensor.copy_(buf);
}

std::vector<at::Tensor> ProcessGroup::all_gather(const at::Tensor& tensor) {
  check_tensor(*this, tensor, "all_gather");
  std::vector<at::Tensor> in{tensor.contiguous()};
  if (world_size() == 1) return {in[0].clone(at::MemoryFormat::Contiguous)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int i = 0; i < world_size(); ++i) out[0].push_back(at::empty_like(in[0]));
  recorded(*impl_, CollectiveKind::Allgather, tensor_bytes(in[0]), [&] {
    return make_work(impl_->backend->allgather(out, in, c10d::AllgatherOptions()), describe("all_gather", tensor),
                     rank());
  }).wait();
  return out[0];
}

void ProcessGroup::barrier() {
  // Like Gloo's barrier, wait for this rank's collectives in flight first.
  if (impl_->shm)
    if (auto last = impl_->shm->last()) AsyncWork(last, "shared-memory allreduce (before a barrier)", rank()).wait();
  if (world_size() == 1) return;  // nobody to wait for
  c10d::BarrierOptions o;
  if (impl_->device.is_cuda()) o.device_ids = {impl_->device.index()};
  recorded(*impl_, CollectiveKind::Barrier, 0, [&] { return make_work(impl_->backend->barrier(o), "barrier", rank()); })
      .wait();
}

}  // namespace ddp::worker
