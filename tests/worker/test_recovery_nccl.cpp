// In-place recovery's NCCL path (worker/src/nccl_abort.h, recovery.h) in
// process. Which ranks may advertise recovery, and that only an NCCL group
// is watched and aborted, run everywhere (about 4 s for the binary here,
// most of it LibTorch's load). The abort and the re-forming of an NCCL group
// need a GPU (scripts/gpu-check runs them) and skip without one; the
// re-forming is at world size 1, which one GPU allows: two NCCL ranks cannot
// share a device.
#include <torch/torch.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

#include "ddp/common/heartbeat.h"
#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/process_group_native.h"
#include "ddp/worker/recovery.h"
#include "test_skip.h"

using namespace ddp::worker;

namespace {

// A 1-rank group of `backend` on `device` with a heartbeat page, which the
// test then writes as the launcher would.
std::shared_ptr<ProcessGroup> group_with_page(const std::string& backend, const std::string& device,
                                              std::unique_ptr<ddp::Heartbeat>& page) {
  const std::string path = "/tmp/ddp-recovery-" + backend + "-" + std::to_string(::getpid());
  page = ddp::Heartbeat::create(path);
  DistEnv env = DistEnv::single_process();
  env.heartbeat_file = path;
  InitOptions o;
  o.backend = backend;
  o.device = device;
  auto pg = init_process_group(env, o);
  ::unlink(path.c_str());
  return pg;
}

}  // namespace

TEST_CASE("in-place recovery: Gloo on the CPU may advertise, NCCL on CUDA only where the runtime has NCCL",
          "[recovery]") {
  CHECK(recovery_backend_supported("gloo", false));
  CHECK_FALSE(recovery_backend_supported("gloo", true));  // Gloo's CUDA collectives: not re-formed
  CHECK_FALSE(recovery_backend_supported("nccl", false));
#ifdef DDP_WORKER_HAVE_NCCL
  CHECK(recovery_backend_supported("nccl", true));
#else
  CHECK_FALSE(recovery_backend_supported("nccl", true));
#endif
  CHECK_FALSE(recovery_backend_supported("mpi", true));
}

TEST_CASE("in-place recovery: a survivor waits DDP_RECOVERY_WAIT_S for the new generation, 5 s without it, a bad value "
          "named",
          "[recovery]") {
  ::unsetenv("DDP_RECOVERY_WAIT_S");
  CHECK(recovery_wait() == std::chrono::seconds(5));
  ::setenv("DDP_RECOVERY_WAIT_S", "30.5", 1);
  CHECK(recovery_wait() == std::chrono::milliseconds(30500));
  for (const char* bad : {"0", "-1", "soon", "1e9"}) {
    ::setenv("DDP_RECOVERY_WAIT_S", bad, 1);
    CHECK_THROWS_WITH(recovery_wait(), Catch::Contains(std::string("DDP_RECOVERY_WAIT_S=") + bad + " is not a wait"));
  }
  ::unsetenv("DDP_RECOVERY_WAIT_S");
}

TEST_CASE("in-place recovery: a new generation on the page aborts only an NCCL group, never a Gloo one (its "
          "collective fails by itself)",
          "[recovery]") {
  // A Gloo group that advertises starts no watch: the page's new generation
  // leaves it as it was (its sockets close with the lost peer).
  std::unique_ptr<ddp::Heartbeat> page;
  auto pg = group_with_page("gloo", "cpu", page);
  advertise_recovery(*pg, true);
  page->set_recovery_generation(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // 25 times the watch's period
  CHECK_FALSE(group_interrupted(*pg));
  CHECK(requested_generation(*pg) == 1);
}

TEST_CASE("in-place recovery on cuda: an NCCL group is aborted on the launcher's new generation and re-formed under "
          "it, and its collectives work again",
          "[recovery][cuda]") {
  if (!recovery_backend_supported("nccl", true)) {
    DDP_SKIP("this runtime was built without NCCL (LibTorch without CUDA)");
  }
  if (!torch::cuda::is_available()) {
    DDP_SKIP("no CUDA GPU is visible (scripts/gpu-check runs this case on a GPU machine)");
  }
  std::unique_ptr<ddp::Heartbeat> page;  // the launcher's page for this rank
  auto pg = group_with_page("nccl", "cuda", page);
  REQUIRE(pg->backend() == "nccl");
  // At world size 1 the runtime issues no collective: the backend's own
  // allreduce makes the communicator that is then aborted.
  auto sum = [&](float value) {
    std::vector<at::Tensor> v{torch::full({4}, value, torch::TensorOptions().device(pg->device()))};
    native_backend(*pg)->allreduce(v)->wait();
    return v[0].sum().item<float>();
  };
  CHECK(sum(1) == 4);
  const auto before = native_backend(*pg);
  advertise_recovery(*pg, true);  // an NCCL group watches its page from now on
  CHECK_FALSE(group_interrupted(*pg));
  page->set_recovery_generation(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!group_interrupted(*pg) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(group_interrupted(*pg));
  reform_process_group(*pg, 1);
  CHECK(group_generation(*pg) == 1);
  CHECK_FALSE(group_interrupted(*pg));
  CHECK(native_backend(*pg).get() != before.get());
  CHECK(sum(2) == 8);
}
