#pragma once
// linear_sgemm(x, weight, bias) == linear(x.flatten(1), weight, bias),
// returned as [N, O, 1, 1] like linear_as_conv, its three products (the
// output, the input's and the weight's gradients) each one call of oneDNN's
// sgemm: the JIT-compiled AVX2 / AVX-512 GEMM of the oneDNN that LibTorch
// itself loaded (Debian's LibTorch links libdnnl.so.2 and does its own
// float32 GEMM with reference BLAS). No second oneDNN and no build-time
// dependency: the function is looked up in the process, once; where
// LibTorch carries oneDNN inside itself (the PyPI wheels, which export none
// of its symbols) it is absent, and onednn_sgemm_available() says so. fc1's
// forward and backward on one core: 0.8 ms a step of 64 images this way,
// 1.8 ms as linear_as_conv's convolutions. CPU float32 only.

#include <ATen/core/Tensor.h>

namespace ddp::fashion {

// Whether this process has oneDNN's dnnl_sgemm (looked up once).
bool onednn_sgemm_available();

// Throws when !onednn_sgemm_available(), or for tensors other than CPU
// float32 with weight [O, K] and x of K values a sample.
at::Tensor linear_sgemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ddp::fashion
