// The bytes a tensor's elements take: numel × element size, the size a
// collective moves and a heartbeat records. Unlike TensorBase::nbytes() it
// is defined for every layout (a sparse tensor counts its logical elements).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ddp::worker {

inline uint64_t tensor_bytes(const at::Tensor& t) { return static_cast<uint64_t>(t.numel()) * t.element_size(); }

}  // namespace ddp::worker
