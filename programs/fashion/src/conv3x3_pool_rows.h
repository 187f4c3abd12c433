#pragma once
// The forward arithmetic of conv3x3_relu_max_pool2x2 (internal to
// ddp_fashion; conv3x3_relu_max_pool.cpp owns the tensors and autograd):
// one output channel of one image, from its zero-padded input to pooled
// values and one-byte argmaxes.
//
// The input is split once per image into its even and odd columns, so the
// convolution computes the even and the odd outputs of a row as separate
// vectors: the four values of every 2x2 window then sit in the same lane of
// four vectors, and pooling needs no shuffles. Each output is summed in the
// scalar kernel's order (bias, then the 9 products row by row), with no
// fused multiply-add, so every lane count gives the same bits: 4 lanes
// (SSE2, any x86-64) or 8 (AVX2, where the CPU has it and
// ATEN_CPU_CAPABILITY does not ask for "default").

#include <cstdint>
#include <vector>

namespace ddp::fashion::conv3x3_pool {

// Geometry of one call: N images of H x W, C output channels; the padded
// input has one row and column of zeros around each image and one more
// column (a 4-float load at any patch stays inside its row).
struct Shape {
  std::int64_t n, c_out, h, w, oh, ow, pw, plane;
  Shape(std::int64_t n_, std::int64_t c, std::int64_t h_, std::int64_t w_)
      : n(n_), c_out(c), h(h_), w(w_), oh(h_ / 2), ow(w_ / 2), pw(w_ + 3), plane((h_ + 2) * (w_ + 3)) {}
};

// One image's padded input split into columns: even[r][m] = padded[r][2m],
// odd[r][m] = padded[r][2m + 1], for m <= ow (an output row's windows read
// columns 2m .. 2m + 3).
class SplitImage {
 public:
  explicit SplitImage(const Shape& s) : stride_(s.ow + 1), rows_(s.h + 2), cols_(2 * rows_ * stride_) {}
  void load(const Shape& s, const float* padded);
  const float* even(std::int64_t r) const { return cols_.data() + r * stride_; }
  const float* odd(std::int64_t r) const { return cols_.data() + (rows_ + r) * stride_; }

 private:
  std::int64_t stride_, rows_;
  std::vector<float> cols_;
};

// Output channel c of one image: out and arg point at its [oh, ow] plane,
// padded at the image's padded input, k at the channel's 9 weights.
void channel_rows(const Shape& s, const SplitImage& split, const float* padded, const float* k, float bias,
                  float* out, std::uint8_t* arg);

}  // namespace ddp::fashion::conv3x3_pool
