#include "ddp/fashion/relu_max_pool.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pool_windows.h"

namespace ddp::fashion {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using pool_windows::pool_pixel;
using pool_windows::pool_row;
using pool_windows::unpool_pixel;
using pool_windows::unpool_plane;

// An input in channels-last memory (N, H, W, C), as oneDNN's convolution
// returns for a channels-last input: its windows pool a pixel's channels at
// once. (A tensor of one channel, or of 1x1 planes, is both; it takes the
// NCHW path.)
bool channels_last(const at::Tensor& x) {
  return !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// An input's sizes and its output's (odd H or W drop the last row / column).
struct Dims {
  Dims(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) : n(n), c(c), h(h), w(w), oh(h / 2), ow(w / 2) {}
  std::int64_t n, c, h, w, oh, ow;
};

// NCHW: output rows of all planes; arg [N, C, OH, OW] as out.
void pool_planes(const Dims& d, const float* in, float* out, std::uint8_t* arg) {
  at::parallel_for(0, d.n * d.c * d.oh, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* r0 = in + (r / d.oh) * d.h * d.w + (r % d.oh) * 2 * d.w;
      pool_row(r0, r0 + d.w, d.ow, out + r * d.ow, arg + r * d.ow);
    }
  });
}

void unpool_planes(const Dims& d, const float* g, const std::uint8_t* arg, float* grad_in) {
  at::parallel_for(0, d.n * d.c, 8, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p)
      unpool_plane(g + p * d.oh * d.ow, arg + p * d.oh * d.ow, d.oh, d.ow, d.h, d.w, grad_in + p * d.h * d.w);
  });
}

// Channels last: a row of output pixels at a time, pooled into `row` (OW x C)
// and written to the NCHW output channel by channel; arg [N, OH, OW, C].
void pool_pixels(const Dims& d, const float* in, float* out, std::uint8_t* arg) {
  at::parallel_for(0, d.n * d.oh, 8, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> row(d.ow * d.c);
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t img = r / d.oh, i = r % d.oh;
      const float* src = in + (img * d.h + 2 * i) * d.w * d.c;
      for (std::int64_t j = 0; j < d.ow; ++j)
        pool_pixel(src + 2 * j * d.c, d.c, d.w * d.c, d.c, row.data() + j * d.c, arg + (r * d.ow + j) * d.c);
      for (std::int64_t c = 0; c < d.c; ++c) {
        float* o = out + ((img * d.c + c) * d.oh + i) * d.ow;
        for (std::int64_t j = 0; j < d.ow; ++j) o[j] = row[j * d.c + c];
      }
    }
  });
}

// Channels last: each output row's gradients gathered from the NCHW g into
// `row`, then written to its windows; zeros where an odd H or W leaves a
// row or column out of every window.
void unpool_pixels(const Dims& d, const float* g, const std::uint8_t* arg, float* grad_in) {
  const std::int64_t pixel_row = d.w * d.c;
  at::parallel_for(0, d.n * d.oh, 8, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> row(d.ow * d.c);
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t img = r / d.oh, i = r % d.oh;
      for (std::int64_t c = 0; c < d.c; ++c) {
        const float* src = g + ((img * d.c + c) * d.oh + i) * d.ow;
        for (std::int64_t j = 0; j < d.ow; ++j) row[j * d.c + c] = src[j];
      }
      float* dst = grad_in + (img * d.h + 2 * i) * pixel_row;
      for (std::int64_t j = 0; j < d.ow; ++j)
        unpool_pixel(row.data() + j * d.c, arg + (r * d.ow + j) * d.c, d.c, pixel_row, d.c, dst + 2 * j * d.c);
      if (d.w % 2) {
        std::fill_n(dst + (d.w - 1) * d.c, d.c, 0.0f);
        std::fill_n(dst + pixel_row + (d.w - 1) * d.c, d.c, 0.0f);
      }
      if (d.h % 2 && i + 1 == d.oh) std::fill_n(dst + 2 * pixel_row, pixel_row, 0.0f);
    }
  });
}

class ReluMaxPool2x2 : public torch::autograd::Function<ReluMaxPool2x2> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input) {
    TORCH_CHECK(input.dim() == 4 && input.scalar_type() == at::kFloat,
                "relu_max_pool2x2: expected a float [N, C, H, W] tensor, got ", input.sizes(), " ",
                input.scalar_type());
    const bool nhwc = channels_last(input);
    const at::Tensor x = nhwc ? input : input.contiguous();
    const Dims d(x.size(0), x.size(1), x.size(2), x.size(3));
    TORCH_CHECK(d.oh > 0 && d.ow > 0, "relu_max_pool2x2: input ", x.sizes(), " is smaller than 2x2");
    at::Tensor out = at::empty({d.n, d.c, d.oh, d.ow}, x.options());
    const std::vector<std::int64_t> arg_shape =
        nhwc ? std::vector<std::int64_t>{d.n, d.oh, d.ow, d.c} : std::vector<std::int64_t>{d.n, d.c, d.oh, d.ow};
    at::Tensor arg = at::empty(arg_shape, x.options().dtype(at::kByte));
    (nhwc ? pool_pixels : pool_planes)(d, x.data_ptr<float>(), out.data_ptr<float>(), arg.data_ptr<std::uint8_t>());
    ctx->saved_data["arg"] = arg;
    ctx->saved_data["dims"] = std::vector<std::int64_t>{d.n, d.c, d.h, d.w};
    ctx->saved_data["nhwc"] = nhwc;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor arg = ctx->saved_data["arg"].toTensor();
    const auto v = ctx->saved_data["dims"].toIntVector();
    const bool nhwc = ctx->saved_data["nhwc"].toBool();
    const Dims d(v[0], v[1], v[2], v[3]);
    const at::Tensor g = grads[0].contiguous();
    const auto layout = nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    at::Tensor grad_in = at::empty({d.n, d.c, d.h, d.w}, g.options().memory_format(layout));
    (nhwc ? unpool_pixels : unpool_planes)(d, g.data_ptr<float>(), arg.data_ptr<std::uint8_t>(),
                                           grad_in.data_ptr<float>());
    return {grad_in};
  }
};

}  // namespace

at::Tensor relu_max_pool2x2(const at::Tensor& x) { return ReluMaxPool2x2::apply(x); }

}  // namespace ddp::fashion
