#pragma once
// linear_as_conv(x, weight, bias) == linear(x.flatten(1), weight, bias),
// returned as [N, O, 1, 1], computed by oneDNN's convolutions: x [N, C, H, W]
// is the whole input of one "convolution" whose kernel is the Linear layer's
// weight [O, C*H*W] seen as [O, C, H, W]. Debian's LibTorch does GEMM with
// reference BLAS, convolutions through oneDNN: a training step is ~1.5x
// faster this way. The backward is written out because LibTorch 1.13's
// convolution backward hands the weight's gradient back from oneDNN's
// layout through a scalar strided copy that took longer than the products
// (0.93 ms a step of 64 images on one core): here the weight's gradient is
// itself a convolution, of the output gradient by the transposed input,
// and comes out in the weight's own layout.

#include <ATen/core/Tensor.h>

namespace ddp::fashion {

at::Tensor linear_as_conv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ddp::fashion
