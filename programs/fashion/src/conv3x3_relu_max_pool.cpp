#include "ddp/fashion/conv3x3_relu_max_pool.h"

#include <torch/torch.h>

#include <cstdint>

#include "conv3x3_pool_rows.h"
#include "pool_windows.h"

namespace ddp::fashion {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using namespace pool_windows;
using conv3x3_pool::Shape;
using conv3x3_pool::SplitImage;

// x [N, 1, H, W] -> zero-padded [N, H + 2, W + 3]: one row and column of
// zeros around each image, so the kernels need no edge cases, and one more
// column so that a 4-float load at any patch stays inside its row.
at::Tensor pad_images(const at::Tensor& x) {
  return at::constant_pad_nd(x.reshape({x.size(0), x.size(2), x.size(3)}), {1, 2, 1, 1}, 0).contiguous();
}

// Weight and bias gradients of output channel c: over every window relu
// let through, its gradient times the 3x3 patch under its maximum (each
// patch row one 4-float load, the 4th lane unused), summed in window order.
void channel_gradients(const Shape& s, std::int64_t c, const float* xp, const float* g, const std::uint8_t* arg,
                       float* gw, float* gb) {
  F4 acc[3] = {};
  float bias = 0.0f;
  for (std::int64_t img = 0; img < s.n; ++img) {
    const float* src = xp + img * s.plane;
    const std::int64_t first = (img * s.c_out + c) * s.oh * s.ow;
    for (std::int64_t i = 0; i < s.oh; ++i) {
      for (std::int64_t j = 0; j < s.ow; ++j) {
        const std::int64_t window = first + i * s.ow + j;
        const std::uint8_t k = arg[window];
        if (k == kNone) continue;
        const float gv = g[window];
        const F4 g4 = {gv, gv, gv, gv};
        const float* p = src + (2 * i + (k >> 1)) * s.pw + 2 * j + (k & 1);
        acc[0] += g4 * load(p);
        acc[1] += g4 * load(p + s.pw);
        acc[2] += g4 * load(p + 2 * s.pw);
        bias += gv;
      }
    }
  }
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 3; ++t) gw[c * 9 + r * 3 + t] = acc[r][t];
  gb[c] = bias;
}

class Conv3x3ReluMaxPool : public torch::autograd::Function<Conv3x3ReluMaxPool> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    TORCH_CHECK(x.dim() == 4 && x.size(1) == 1 && x.scalar_type() == at::kFloat,
                "conv3x3_relu_max_pool2x2: expected float input [N, 1, H, W], got ", x.sizes());
    TORCH_CHECK(weight.dim() == 4 && weight.size(1) == 1 && weight.size(2) == 3 && weight.size(3) == 3,
                "conv3x3_relu_max_pool2x2: expected weight [C, 1, 3, 3], got ", weight.sizes());
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0),
                "conv3x3_relu_max_pool2x2: bias ", bias.sizes(), " does not match weight ", weight.sizes());
    TORCH_CHECK(x.size(2) >= 2 && x.size(3) >= 2, "conv3x3_relu_max_pool2x2: input ", x.sizes(),
                " is smaller than 2x2");
    const Shape s(x.size(0), weight.size(0), x.size(2), x.size(3));
    const at::Tensor xp = pad_images(x);
    const at::Tensor wc = weight.contiguous(), bc = bias.contiguous();
    at::Tensor out = at::empty({s.n, s.c_out, s.oh, s.ow}, x.options());
    at::Tensor arg = at::empty({s.n, s.c_out, s.oh, s.ow}, x.options().dtype(at::kByte));
    const float* xp_p = xp.data_ptr<float>();
    const float* w_p = wc.data_ptr<float>();
    const float* b_p = bc.data_ptr<float>();
    float* out_p = out.data_ptr<float>();
    std::uint8_t* arg_p = arg.data_ptr<std::uint8_t>();
    at::parallel_for(0, s.n * s.c_out, 16, [&](std::int64_t begin, std::int64_t end) {
      SplitImage split(s);
      for (std::int64_t nc = begin, loaded = -1; nc < end; ++nc) {
        const std::int64_t img = nc / s.c_out, c = nc % s.c_out;
        const float* src = xp_p + img * s.plane;
        if (img != loaded) split.load(s, src), loaded = img;
        const std::int64_t first = nc * s.oh * s.ow;
        conv3x3_pool::channel_rows(s, split, src, w_p + c * 9, b_p[c], out_p + first, arg_p + first);
      }
    });
    ctx->save_for_backward({weight});
    ctx->saved_data["xp"] = xp;
    ctx->saved_data["arg"] = arg;
    ctx->saved_data["h"] = s.h;
    ctx->saved_data["w"] = s.w;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor weight = ctx->get_saved_variables()[0];
    const at::Tensor xp = ctx->saved_data["xp"].toTensor();
    const at::Tensor arg = ctx->saved_data["arg"].toTensor();
    const Shape s(arg.size(0), arg.size(1), ctx->saved_data["h"].toInt(), ctx->saved_data["w"].toInt());
    const at::Tensor g = grads[0].contiguous();
    at::Tensor gw = at::empty({s.c_out, 1, 3, 3}, g.options());
    at::Tensor gb = at::empty({s.c_out}, g.options());
    const float* g_p = g.data_ptr<float>();
    const std::uint8_t* arg_p = arg.data_ptr<std::uint8_t>();
    const float* xp_p = xp.data_ptr<float>();
    float* gw_p = gw.data_ptr<float>();
    float* gb_p = gb.data_ptr<float>();
    at::parallel_for(0, s.c_out, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) channel_gradients(s, c, xp_p, g_p, arg_p, gw_p, gb_p);
    });
    at::Tensor gx;
    if (ctx->needs_input_grad(0)) {
      at::Tensor dense = at::empty({s.n, s.c_out, s.h, s.w}, g.options());
      float* d_p = dense.data_ptr<float>();
      at::parallel_for(0, s.n * s.c_out, 8, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t p = begin; p < end; ++p)
          unpool_plane(g_p + p * s.oh * s.ow, arg_p + p * s.oh * s.ow, s.oh, s.ow, s.h, s.w, d_p + p * s.h * s.w);
      });
      gx = at::conv_transpose2d(dense, weight, {}, 1, 1);
    }
    return {gx, gw, gb};
  }
};

}  // namespace

at::Tensor conv3x3_relu_max_pool2x2(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return Conv3x3ReluMaxPool::apply(x, weight, bias);
}

}  // namespace ddp::fashion
