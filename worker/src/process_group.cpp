// init_process_group and the ProcessGroup wrapper over a c10d backend.
// Rendezvous follows Python's env:// path step by step (see process_group.h)
// so that C++ and Python ranks can share a group.

#include "ddp/worker/process_group.h"

#include <torch/cuda.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "ddp/common/duration_text.h"
#include "ddp/common/host_resolve.h"
#include "ddp/common/parse.h"
#include "ddp/worker/compat.h"
#include "ddp/worker/device_choice.h"
#include "ddp/worker/peer_failure.h"
#include "ddp/worker/process_group_native.h"
#include "ddp/worker/training_step.h"
#include "tensor_bytes.h"
#include "heartbeat_recorder.h"
#include "make_process_group.h"
#include "shm_allreduce.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#ifdef DDP_WORKER_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddp::worker {

struct ProcessGroup::Impl {
  DistEnv env;
  std::string backend_name;
  c10::Device device{c10::kCPU};
  std::chrono::milliseconds timeout{};
  c10::intrusive_ptr<c10d::Store> tcp_store;  // the TCPStore itself (HashStore when standalone)
  c10::intrusive_ptr<c10d::Store> store;      // PrefixStore("default_pg", ...)
  c10::intrusive_ptr<compat::Backend> backend;
  // Gloo for host_allreduce_async: `backend` itself when it is Gloo, else
  // made on first use.
  std::once_flag host_once;
  c10::intrusive_ptr<compat::Backend> host_backend;
  // Float sums through shared memory when every rank is on this machine.
  std::unique_ptr<ShmAllreduce> shm;
  std::string shm_off_reason;
  // The rank's progress heartbeat (DistEnv::heartbeat_file); null: none.
  std::shared_ptr<CollectiveRecorder> heartbeat;
};

namespace {

std::string endpoint(const DistEnv& env) {
  return env.master_addr + ":" + std::to_string(env.master_port);
}

std::string what_of(const std::exception& e) {
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// Ranks that reached the backend's rendezvous: Gloo's connectFullMesh
// publishes a key per rank in the backend store before it waits for the
// others, Python ranks included (compat::gloo_rank_key). Returns the ranks missing, or nullopt
// when the store cannot be asked.
std::optional<std::vector<int>> missing_ranks(const c10::intrusive_ptr<c10d::Store>& backend_store, int world) {
  try {
    std::vector<int> missing;
    for (int r = 0; r < world; ++r)
      if (!backend_store->check({compat::gloo_rank_key(compat::kLibTorch, r)})) missing.push_back(r);
    return missing;
  } catch (...) {
    return std::nullopt;
  }
}

std::string joined_text(const std::optional<std::vector<int>>& missing, int world) {
  if (!missing) return "unknown how many of " + std::to_string(world) + " ranks joined";
  std::string t = std::to_string(world - static_cast<int>(missing->size())) + "/" + std::to_string(world) +
                  " ranks joined";
  if (!missing->empty()) {
    t += ", missing rank";
    if (missing->size() > 1) t += "s";
    for (size_t i = 0; i < missing->size() && i < 16; ++i) t += (i ? ", " : " ") + std::to_string((*missing)[i]);
    if (missing->size() > 16) t += ", ...";
  }
  return t;
}

// The device and backend of this rank (device_choice.h): InitOptions, else
// DDP_BACKEND, then the GPUs LibTorch sees.
DeviceChoice resolve_device(const InitOptions& opt, const DistEnv& env) {
  std::string b = opt.backend;
  std::string source = "InitOptions::backend";
  if (b.empty()) {
    if (auto e = get_env("DDP_BACKEND"); e && !e->empty()) {
      b = *e;
      source = "DDP_BACKEND";
    }
  }
  DeviceFacts facts;
  facts.local_rank = env.local_rank;
  facts.cuda_devices = static_cast<int>(torch::cuda::device_count());
#ifdef DDP_WORKER_LIBTORCH_CUDA
  facts.libtorch_has_cuda = true;
#endif
#ifdef DDP_WORKER_HAVE_NCCL
  facts.have_nccl = true;
#endif
  try {
    return choose_device(parse_device_request(opt.device, "InitOptions::device"), b, source, facts);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("rank " + std::to_string(env.rank) + ": " + e.what());
  }
}

// DDP_SHM_ALLREDUCE: on unless a false spelling (0, false, no, off, any
// case); unset or empty is on; anything else is refused at start.
bool resolve_shm_allreduce() {
  auto e = get_env("DDP_SHM_ALLREDUCE");
  return !e || e->empty() || parse_bool(*e, "DDP_SHM_ALLREDUCE");
}

// MASTER_ADDR is resolved once before the TCPStore is made: c10d retries a
// name that does not resolve every second until the timeout, with a warning
// each time, and then the failure reads like a port problem.
void check_master_addr(const DistEnv& env) {
  const std::string err = host_resolve_error(env.master_addr);
  if (!err.empty())
    throw std::runtime_error("rank " + std::to_string(env.rank) + ": MASTER_ADDR " + env.master_addr +
                             " does not resolve (" + err + "): give rank 0's host as an IP address or a name this "
                             "machine resolves (check the spelling, DNS, /etc/hosts)");
}

// Waits until something accepts TCP connections at host:port, or the
// deadline. LibTorch 2.x's TCPStore client sleeps a random back-off of up to
// a few seconds after a failed try even when its timeout has run out, which
// made an unreachable store overrun DDP_TIMEOUT_S by that much; probing with
// plain connects first keeps the wait within the deadline. True when reachable.
bool wait_for_listener(const std::string& host, int port, std::chrono::steady_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  while (true) {
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) == 0) {
      for (addrinfo* a = res; a; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        if (!ok && errno == EINPROGRESS) {
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
              deadline - std::chrono::steady_clock::now());
          pollfd p{fd, POLLOUT, 0};
          int err = 0;
          socklen_t len = sizeof(err);
          ok = ::poll(&p, 1, static_cast<int>(std::clamp<long long>(left.count(), 0, 1000))) == 1 &&
               ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
        }
        ::close(fd);
        if (ok) {
          ::freeaddrinfo(res);
          return true;
        }
      }
      ::freeaddrinfo(res);
    }
    if (std::chrono::steady_clock::now() + std::chrono::milliseconds(50) >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Connects to (or, on rank 0 without an agent store, hosts) the TCPStore.
// Clients announce themselves like Python's (numWorkers + waitWorkers bumps
// the store's "init/" count that a Python host waits on). The host does not
// block here: it would wait a second full timeout in 1.13, which silently
// gives up after it; the ranks are counted at the backend's rendezvous.
c10::intrusive_ptr<c10d::TCPStore> connect_store(const DistEnv& env, std::chrono::milliseconds timeout) {
  const bool host = env.rank == 0 && !env.use_agent_store;
  check_master_addr(env);  // before the try: not a port or reachability problem
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  try {
    if (!host && !wait_for_listener(env.master_addr, env.master_port, deadline))
      throw std::runtime_error("nothing accepted a connection at " + endpoint(env));
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      auto opts = compat::tcp_store_options(static_cast<std::uint16_t>(env.master_port), host,
                                            static_cast<std::size_t>(env.world_size),
                                            /*wait_workers=*/!host, std::max(left, std::chrono::milliseconds(1000)));
      try {
        auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, opts);
        tcp->setTimeout(timeout);
        return tcp;
      } catch (const std::exception&) {
        // c10d's connect gives up up to a second early (whole-second
        // arithmetic); keep trying until our own deadline.
        if (host || std::chrono::steady_clock::now() + std::chrono::milliseconds(100) >= deadline) throw;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  } catch (const std::exception& e) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    const std::string cause = what_of(e);
    std::ostringstream m;
    m << "rank " << env.rank << ": rendezvous store at " << endpoint(env) << " ";
    if (host) {
      m << "could not be hosted by this rank (is port " << env.master_port
        << " already in use? pick a free MASTER_PORT): " << cause;
    } else {
      m << "could not be reached within the timeout of " << seconds_text(timeout) << " (gave up after "
        << seconds_text(waited) << "; unknown how many of " << env.world_size
        << " ranks joined: this rank never reached the store). Check that rank 0"
        << (env.use_agent_store ? "'s launcher (TORCHELASTIC_USE_AGENT_STORE=True)" : "")
        << " is running and that MASTER_ADDR/MASTER_PORT point at it, or raise DDP_TIMEOUT_S. Cause: " << cause;
    }
    throw std::runtime_error(m.str());
  }
}

// Python's _store_based_barrier: every rank adds 1 to the key, then waits
// until the count reaches world_size. Polls every 10 ms like Python does.
void store_based_barrier(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
                         const DistEnv& env, std::chrono::milliseconds timeout) {
  store->add(key, 1);
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    auto count = store->add(key, 0);
    if (count >= env.world_size) return;
    if (std::chrono::steady_clock::now() - start > timeout)
      throw std::runtime_error("rank " + std::to_string(env.rank) + ": timed out after " +
                               seconds_text(timeout) + " in the store-based barrier at " +
                               endpoint(env) + ": " + std::to_string(count) + "/" +
                               std::to_string(env.world_size) +
                               " ranks reached it. Check that every rank started and did not fail.");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

c10::intrusive_ptr<compat::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                              const DistEnv& env, std::chrono::milliseconds timeout) {
  auto opts = compat::GlooOptions::create(timeout);
  // Same device choice as Python's ProcessGroupGloo binding.
  if (auto ifnames = get_env("GLOO_SOCKET_IFNAME"); ifnames && !ifnames->empty()) {
    std::stringstream ss(*ifnames);
    std::string name;
    while (std::getline(ss, name, ','))
      if (!name.empty()) opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  } else {
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, opts);
}

#ifdef DDP_WORKER_HAVE_NCCL
c10::intrusive_ptr<compat::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                              const DistEnv& env, c10::Device device,
                                              std::chrono::milliseconds timeout) {
  c10::cuda::set_device(device.index());
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, opts);
}
#endif

}  // namespace

// The longest timeout: INT_MAX milliseconds (24.8 days), the longest wait
// poll(2) takes, so no layer that hands it on in int milliseconds overflows.
// Larger values are refused, not clamped, as Python refuses them
// (timedelta(seconds=1e20) is an OverflowError before torch sees it); 1e20
// used to wrap around into a negative timeout.
constexpr long long kMaxTimeoutMs = 2147483647;

std::chrono::milliseconds resolve_timeout(const InitOptions& opt) {
  auto t = opt.timeout;
  if (t == InitOptions::kDefaultTimeout) {
    if (auto env = get_env("DDP_TIMEOUT_S")) {
      // Seconds in, seconds out: 0 and anything that rounds to 0 ms are
      // refused here, in the variable's own unit (the timers count whole ms).
      const double s = parse_seconds(*env, "DDP_TIMEOUT_S");
      if (std::llround(s * 1000.0) < 1 || s * 1000.0 > static_cast<double>(kMaxTimeoutMs))
        throw std::invalid_argument("DDP_TIMEOUT_S: " + *env + " is out of range, expected seconds from 0.001 to " +
                                    std::to_string(kMaxTimeoutMs / 1000) + " (24.8 days)");
      t = std::chrono::milliseconds(std::llround(s * 1000.0));
    }
  }
  if (t.count() <= 0 || t.count() > kMaxTimeoutMs)
    throw std::invalid_argument("InitOptions::timeout must be from 0.001 s to " +
                                seconds_text(std::chrono::milliseconds(kMaxTimeoutMs)) + " (24.8 days), got " +
                                seconds_text(t));
  return t;
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options, int argc, char** argv) {
  return init_process_group(DistEnv::from_environment(argc, argv), options);
}

std::shared_ptr<ProcessGroup> init_process_group(const DistEnv& env, const InitOptions& options) {
  return make_process_group(env, options, {});
}

// `shared_store`: the in-memory store of ranks that are threads of this
// process (in_process.h); null: the torchrun rendezvous.
std::shared_ptr<ProcessGroup> make_process_group(const DistEnv& env, const InitOptions& options,
                                                 const c10::intrusive_ptr<c10d::Store>& shared_store) {
  auto impl = std::make_unique<ProcessGroup::Impl>();
  impl->env = env;
  const auto choice = resolve_device(options, env);
  impl->backend_name = choice.backend;
  impl->device = choice.device;
  impl->timeout = resolve_timeout(options);
  const bool shm_wanted = resolve_shm_allreduce();

  if (shared_store) {
    impl->tcp_store = shared_store;
  } else if (env.standalone) {
    // No launcher and nobody to meet: an in-memory store serves Gloo's own
    // rendezvous with itself.
    impl->tcp_store = c10::make_intrusive<c10d::HashStore>();
  } else {
    impl->tcp_store = connect_store(env, impl->timeout);
  }
  c10::intrusive_ptr<c10d::Store> base = impl->tcp_store;
  if (env.use_agent_store)  // rendezvous.py: the agent's keys are scoped per attempt
    base = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), base);
  impl->store = c10::make_intrusive<c10d::PrefixStore>("default_pg", base);

  const auto start = std::chrono::steady_clock::now();
  // Python registers Gloo under "cpu" even for CUDA tensors, NCCL under "cuda".
  auto bstore = compat::backend_store(impl->store, impl->backend_name == "nccl" ? "cuda" : "cpu");
  try {
#ifdef DDP_WORKER_HAVE_NCCL
    if (impl->backend_name == "nccl") impl->backend = make_nccl(bstore, env, impl->device, impl->timeout);
    else
#endif
      impl->backend = make_gloo(bstore, env, impl->timeout);
    if (auto key = compat::init_barrier_key()) store_based_barrier(impl->store, *key, env, impl->timeout);
    impl->backend->setSequenceNumberForGroup();
    if (impl->backend_name != "gloo" || !impl->device.is_cpu())
      impl->shm_off_reason = "the group is not Gloo on the CPU";
    else if (env.standalone)
      impl->shm_off_reason = "a group of one rank";
    else if (shared_store)
      impl->shm_off_reason = "the ranks are threads of one process";
    else
      impl->shm = ShmAllreduce::negotiate(*impl->store, env.rank, env.world_size, impl->timeout, shm_wanted,
                                          &impl->shm_off_reason);
  } catch (const std::exception& e) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    const auto missing = missing_ranks(bstore, env.world_size);
    const bool late = missing && !missing->empty();
    throw std::runtime_error("rank " + std::to_string(env.rank) + ": rendezvous of the " + impl->backend_name +
                             " process group at " + endpoint(env) + " failed after " + seconds_text(waited) +
                             " (timeout of " + seconds_text(impl->timeout) + "; " +
                             joined_text(missing, env.world_size) + "). " +
                             (late ? "Check that every rank was started with the same MASTER_ADDR/MASTER_PORT "
                                     "and WORLD_SIZE, or raise DDP_TIMEOUT_S."
                                   : "A peer may have died or be unreachable from this host (GLOO_SOCKET_IFNAME "
                                     "selects the network interface).") +
                             " Cause: " + what_of(e));
  }
  // Once the group works: collectives are what the heartbeat counts.
  if (!env.heartbeat_file.empty()) impl->heartbeat = CollectiveRecorder::attach(env.heartbeat_file, env.rank);
  return std::make_shared<ProcessGroup>(std::move(impl));
}

// ---- ProcessGroup ------------------------------------------------------------

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

c10::intrusive_ptr<compat::Backend> native_backend(ProcessGroup& pg) { return pg.impl().backend; }
c10::intrusive_ptr<c10d::Store> native_store(ProcessGroup& pg) { return pg.impl().store; }

void training_step(ProcessGroup& pg, std::uint64_t step) {
  if (pg.impl().heartbeat) pg.impl().heartbeat->step(step);
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

AsyncWork make_work(c10::intrusive_ptr<compat::Work> w, std::string what, int rank) {
  return AsyncWork(std::make_shared<c10::intrusive_ptr<compat::Work>>(std::move(w)), std::move(what), rank);
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

// A group of one rank: every collective is the identity on its tensor (a
// sum, max, min or mean of one value, a broadcast from itself), so none is
// issued: no backend call and no heartbeat record, as nothing can wait for a
// peer (the page still counts the steps). The work is complete at once.
AsyncWork done_at_once(std::string what, int rank) {
  auto w = std::make_shared<LocalWork>();
  w->finish(nullptr);
  return AsyncWork(std::move(w), std::move(what), rank);
}

void check_root(const ProcessGroup& pg, int root) {
  if (root < 0 || root >= pg.world_size())
    throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is not a rank of a group of " +
                                std::to_string(pg.world_size()));
}

}  // namespace

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
                                         " failed (a peer may have exited or timed out): " + what_of(e));
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(rank_) + ": " + what_ +
                             " failed (a peer may have exited or timed out): " + what_of(e));
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
