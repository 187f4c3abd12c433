// choose_device: the device/backend rules with a given GPU count, so the
// CUDA rules are checked on machines without a GPU.
#include <catch2/catch.hpp>

#include "ddp/worker/device_choice.h"

using namespace ddp::worker;

namespace {
DeviceFacts facts(int local_rank, int gpus, bool nccl = true) {
  DeviceFacts f;
  f.local_rank = local_rank;
  f.cuda_devices = gpus;
  f.libtorch_has_cuda = nccl;
  f.have_nccl = nccl;
  return f;
}
}  // namespace

TEST_CASE("device choice: cpu, cuda and auto parse, anything else names the value") {
  CHECK(parse_device_request("cpu", "--device") == DeviceRequest::Cpu);
  CHECK(parse_device_request("cuda", "--device") == DeviceRequest::Cuda);
  CHECK(parse_device_request("auto", "--device") == DeviceRequest::Auto);
  CHECK(parse_device_request("", "--device") == DeviceRequest::Auto);
  CHECK_THROWS_WITH(parse_device_request("gpu", "--device"),
                    "--device: unknown device 'gpu', use cpu, cuda or auto");
}

TEST_CASE("device choice: auto picks the CPU and Gloo without a GPU, a GPU and NCCL with one") {
  auto c = choose_device(DeviceRequest::Auto, "", "DDP_BACKEND", facts(1, 0));
  CHECK(c.device == c10::Device(c10::kCPU));
  CHECK(c.backend == "gloo");
  c = choose_device(DeviceRequest::Auto, "", "DDP_BACKEND", facts(1, 2));
  CHECK(c.device == c10::Device(c10::kCUDA, 1));
  CHECK(c.backend == "nccl");
  // An explicit gloo keeps auto on the CPU, as before devices were a choice.
  c = choose_device(DeviceRequest::Auto, "gloo", "DDP_BACKEND", facts(0, 2));
  CHECK(c.device == c10::Device(c10::kCPU));
  // Without NCCL in the build, auto on a GPU is Gloo over CUDA tensors.
  c = choose_device(DeviceRequest::Auto, "", "DDP_BACKEND", facts(0, 1, false));
  CHECK(c.device == c10::Device(c10::kCUDA, 0));
  CHECK(c.backend == "gloo");
}

TEST_CASE("device choice: cuda without a GPU is one line saying what to do") {
  CHECK_THROWS_WITH(choose_device(DeviceRequest::Cuda, "", "DDP_BACKEND", facts(0, 0, false)),
                    Catch::Contains("device cuda: no CUDA GPU is visible") &&
                        Catch::Contains("built without CUDA") && Catch::Contains("use device cpu or auto"));
  CHECK_THROWS_WITH(choose_device(DeviceRequest::Cuda, "", "DDP_BACKEND", facts(0, 0, true)),
                    Catch::Contains("CUDA_VISIBLE_DEVICES"));
}

TEST_CASE("device choice: NCCL takes one GPU per rank and refuses more ranks than GPUs") {
  auto c = choose_device(DeviceRequest::Cuda, "", "DDP_BACKEND", facts(1, 2));
  CHECK(c.device == c10::Device(c10::kCUDA, 1));
  CHECK(c.backend == "nccl");
  CHECK_THROWS_WITH(choose_device(DeviceRequest::Cuda, "nccl", "DDP_BACKEND", facts(2, 2)),
                    "LOCAL_RANK 2: NCCL needs one GPU per rank but 2 GPU(s) are visible (CUDA_VISIBLE_DEVICES); "
                    "start at most 2 processes per node, or use the gloo backend to share GPUs");
}

TEST_CASE("device choice: Gloo over CUDA tensors shares GPUs round robin") {
  for (int r : {0, 1, 2}) {
    auto c = choose_device(DeviceRequest::Cuda, "gloo", "DDP_BACKEND", facts(r, 1));
    CHECK(c.device == c10::Device(c10::kCUDA, 0));
    CHECK(c.backend == "gloo");
  }
  CHECK(choose_device(DeviceRequest::Cuda, "gloo", "DDP_BACKEND", facts(3, 2)).device == c10::Device(c10::kCUDA, 1));
}

TEST_CASE("device choice: backends that cannot work are refused naming the source") {
  CHECK_THROWS_WITH(choose_device(DeviceRequest::Cpu, "nccl", "DDP_BACKEND", facts(0, 1)),
                    Catch::Contains("DDP_BACKEND=nccl needs CUDA tensors"));
  CHECK_THROWS_WITH(choose_device(DeviceRequest::Auto, "nccl", "DDP_BACKEND", facts(0, 1, false)),
                    Catch::Contains("DDP_BACKEND=nccl but this ddp_worker was built without NCCL"));
  CHECK_THROWS_WITH(choose_device(DeviceRequest::Auto, "mpi", "InitOptions::backend", facts(0, 0)),
                    Catch::Contains("InitOptions::backend: unknown backend 'mpi'"));
  CHECK(choose_device(DeviceRequest::Cpu, "gloo", "DDP_BACKEND", facts(0, 4)).device == c10::Device(c10::kCPU));
}
