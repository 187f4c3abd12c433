// init_process_group: the env:// rendezvous of a ProcessGroup. It follows
// Python's env:// path step by step (see process_group.h) so that C++ and
// Python ranks can share a group: the store (hosted, reached, or in memory),
// the backend, the store-based barrier, then the shared-memory negotiation.
// Named env_rendezvous, not rendezvous: launcher/rdzv's rendezvous is the
// c10d (elastic) rendezvous of nodes; this one is a worker joining its group.

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
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "ddp/common/duration_text.h"
#include "ddp/common/host_resolve.h"
#include "ddp/common/parse.h"
#include "ddp/worker/compat.h"
#include "ddp/worker/device_choice.h"
#include "error_text.h"
#include "make_process_group.h"
#include "ddp/worker/recovery.h"
#include "process_group_impl.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#ifdef DDP_WORKER_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddp::worker {

namespace {

std::string endpoint(const DistEnv& env) {
  return env.master_addr + ":" + std::to_string(env.master_port);
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
    const std::string cause = error_text(e);
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
                                                 const c10::intrusive_ptr<c10d::Store>& shared_store,
                                                 std::optional<std::uint64_t> generation) {
  auto impl = std::make_unique<ProcessGroup::Impl>();
  impl->env = env;
  impl->generation = generation ? *generation : shared_store ? 0 : recovery_generation_at_start();
  const auto choice = resolve_device(options, env);
  impl->backend_name = choice.backend;
  impl->device = choice.device;
  impl->timeout = resolve_timeout(options);
  impl->options = options;
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
  // In-place recovery (recovery.h): each generation's group meets under its own prefix.
  if (impl->generation > 0)
    base = c10::make_intrusive<c10d::PrefixStore>("recovery_" + std::to_string(impl->generation), base);
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
                             " Cause: " + error_text(e));
  }
  // Once the group works: collectives are what the heartbeat counts.
  if (!env.heartbeat_file.empty()) impl->heartbeat = CollectiveRecorder::attach(env.heartbeat_file, env.rank);
  return std::make_shared<ProcessGroup>(std::move(impl));
}

}  // namespace ddp::worker
