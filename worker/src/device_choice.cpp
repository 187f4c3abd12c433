// choose_device: the device/backend rules of device_choice.h.
#include "ddp/worker/device_choice.h"

#include <stdexcept>

namespace ddp::worker {

DeviceRequest parse_device_request(const std::string& text, const std::string& what) {
  if (text == "cpu") return DeviceRequest::Cpu;
  if (text == "cuda") return DeviceRequest::Cuda;
  if (text == "auto" || text.empty()) return DeviceRequest::Auto;
  throw std::invalid_argument(what + ": unknown device '" + text + "', use cpu, cuda or auto");
}

DeviceChoice choose_device(DeviceRequest request, const std::string& backend, const std::string& backend_source,
                           const DeviceFacts& f) {
  if (!backend.empty() && backend != "gloo" && backend != "nccl")
    throw std::invalid_argument(backend_source + ": unknown backend '" + backend + "', use gloo (CPU or CUDA) or nccl (CUDA)");
  if (backend == "nccl" && !f.have_nccl)
    throw std::invalid_argument(backend_source + "=nccl but this ddp_worker was built without NCCL "
                                "(LibTorch without CUDA, or nccl.h not found at build time); use gloo");
  if (request == DeviceRequest::Auto)
    request = (f.cuda_devices > 0 && backend != "gloo") ? DeviceRequest::Cuda : DeviceRequest::Cpu;

  if (request == DeviceRequest::Cpu) {
    if (backend == "nccl")
      throw std::invalid_argument(backend_source + "=nccl needs CUDA tensors but the device is cpu; "
                                  "use device cuda, or the gloo backend");
    return {c10::Device(c10::kCPU), "gloo"};
  }

  if (f.cuda_devices <= 0)
    throw std::invalid_argument(std::string("device cuda: no CUDA GPU is visible to rank with LOCAL_RANK ") +
                                std::to_string(f.local_rank) + " (" +
                                (f.libtorch_has_cuda ? "LibTorch has CUDA; check the driver and CUDA_VISIBLE_DEVICES"
                                                     : "this LibTorch was built without CUDA") +
                                "); use device cpu or auto");
  const std::string b = backend.empty() ? (f.have_nccl ? "nccl" : "gloo") : backend;
  if (b == "nccl") {
    if (f.local_rank >= f.cuda_devices)
      throw std::invalid_argument("LOCAL_RANK " + std::to_string(f.local_rank) + ": NCCL needs one GPU per rank but " +
                                  std::to_string(f.cuda_devices) +
                                  " GPU(s) are visible (CUDA_VISIBLE_DEVICES); start at most " +
                                  std::to_string(f.cuda_devices) +
                                  " processes per node, or use the gloo backend to share GPUs");
    return {c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(f.local_rank)), b};
  }
  // Gloo copies CUDA tensors through host memory; ranks may share a GPU.
  return {c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(f.local_rank % f.cuda_devices)), b};
}

}  // namespace ddp::worker
