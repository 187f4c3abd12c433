#pragma once
// conv3x3_single_channel(x, w, b) == conv2d(x, w, b, stride 1, padding 1)
// for a one-channel input x [N, 1, H, W] and weight [C, 1, 3, 3]: the
// model's first layer. LibTorch 1.13's oneDNN path has no fast kernel for a
// single input channel (it took ~30% of a training step); this direct
// kernel vectorizes along image rows. Gradients for weight and bias are
// computed directly (per output channel, so the result does not depend on
// the thread count); the input's gradient, when asked for, comes from
// conv_transpose2d.

#include <ATen/core/Tensor.h>

namespace ddp::fashion {

at::Tensor conv3x3_single_channel(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

}  // namespace ddp::fashion
