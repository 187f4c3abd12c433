#pragma once
// relu_max_pool2x2(x) == max_pool2d(relu(x), 2), values and gradients
// bit for bit (same first-maximum tie rule, no gradient where relu is 0), in
// one pass over x with a one-byte argmax per output. Exists because LibTorch
// 1.13's NCHW max_pool2d_with_indices plus separate relu kernels took ~40%
// of a training step of the Fashion-MNIST model on CPU; the fused kernel
// takes a few percent. Four windows at a time in explicit 4-float vectors,
// without branches: a branchy or compiler-vectorized version cost 6% of a
// step in one build and 29% in another (the same source: which branches the
// compiler kept, and the data, decided). Takes float [N, C, H, W]; odd H or
// W drop the last row / column like max_pool2d's floor mode. An input in
// channels-last memory (oneDNN's convolution returns one for a channels-last
// input, and needs no reorder of its own then) is pooled 4 channels at a
// time, with no shuffles, and its gradient comes back channels last; the
// output is NCHW-contiguous either way (what flatten(1) and a Linear expect).

#include <ATen/core/Tensor.h>

namespace ddp::fashion {

at::Tensor relu_max_pool2x2(const at::Tensor& x);

}  // namespace ddp::fashion
