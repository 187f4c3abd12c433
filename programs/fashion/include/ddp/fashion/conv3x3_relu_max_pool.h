#pragma once
// conv3x3_relu_max_pool2x2(x, w, b) == max_pool2d(relu(conv2d(x, w, b,
// stride 1, padding 1)), 2) for a one-channel input x [N, 1, H, W] and
// weight [C, 1, 3, 3]: the model's first layer, its ReLU and its pooling in
// one pass. The convolution's output is never stored: each pair of its rows
// is computed into a buffer and pooled at once (a one-byte argmax per
// window, relu_max_pool.h's rules), so a 64-batch does not write and read
// back 6.4 MB. The backward needs the argmax only: the weight and bias
// gradients sum, per output channel (the same order whatever the thread
// count), each window's gradient times the 3x3 patch under its maximum,
// a quarter of the positions a dense gradient would visit. The input's
// gradient, when asked for, comes from conv_transpose2d.
//
// LibTorch 1.13's oneDNN path has no fast kernel for a single input channel
// where it lacks AVX-512 (14.5 ms instead of 0.9 ms for a 64-batch's
// forward and backward): this kernel runs the same additions in the same
// order on every x86-64 CPU, in 4 lanes (SSE2) or 8 (AVX2), so its results
// do not depend on the CPU (src/conv3x3_pool_rows.h).

#include <ATen/core/Tensor.h>

namespace ddp::fashion {

at::Tensor conv3x3_relu_max_pool2x2(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ddp::fashion
