#pragma once
// Which device and backend a rank uses, from what was asked (cpu, cuda or
// auto), the backend asked for (gloo, nccl, or "" for the default), its
// LOCAL_RANK and the number of GPUs it sees (after CUDA_VISIBLE_DEVICES, as
// CUDA numbers them). Pure: the GPU count is an argument, so the rules are
// tested on machines without a GPU; init_process_group passes LibTorch's
// count. Rules:
//   cpu   -> Gloo on the CPU (nccl is refused).
//   cuda  -> one GPU per rank, cuda:LOCAL_RANK, NCCL by default; NCCL with
//            more ranks on a node than GPUs is refused. Gloo over CUDA
//            tensors is allowed and may share GPUs: cuda:(LOCAL_RANK % GPUs).
//   auto  -> cuda when a GPU is visible and the backend is not gloo, else cpu.
// Every refusal is one line naming the value and what to do instead.

#include <c10/core/Device.h>

#include <string>

namespace ddp::worker {

enum class DeviceRequest { Cpu, Cuda, Auto };

// "cpu", "cuda", "auto" (or "" = auto). `what` names the source in the error
// ("--device", "InitOptions::device").
DeviceRequest parse_device_request(const std::string& text, const std::string& what);

struct DeviceFacts {
  int local_rank = 0;
  int cuda_devices = 0;         // GPUs this process sees
  bool libtorch_has_cuda = false;
  bool have_nccl = false;       // ddp_worker built with the NCCL backend
};

struct DeviceChoice {
  c10::Device device{c10::kCPU};
  std::string backend;  // "gloo" or "nccl"
};

// `backend`: "gloo", "nccl" or "" (default: nccl on CUDA when built with it,
// else gloo). `backend_source` names where it came from for errors.
DeviceChoice choose_device(DeviceRequest request, const std::string& backend, const std::string& backend_source,
                           const DeviceFacts& facts);

}  // namespace ddp::worker
