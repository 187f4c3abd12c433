#include "ddp/fashion/conv3x3_single_channel.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace ddp::fashion {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// x [N,1,H,W] -> zero-padded [N, H+2, W+2], so the kernels need no edge cases.
at::Tensor pad_images(const at::Tensor& x) {
  return at::constant_pad_nd(x.reshape({x.size(0), x.size(2), x.size(3)}), {1, 1, 1, 1}, 0).contiguous();
}

class Conv3x3SingleChannel : public torch::autograd::Function<Conv3x3SingleChannel> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    TORCH_CHECK(x.dim() == 4 && x.size(1) == 1 && x.scalar_type() == at::kFloat,
                "conv3x3_single_channel: expected float input [N, 1, H, W], got ", x.sizes());
    TORCH_CHECK(weight.dim() == 4 && weight.size(1) == 1 && weight.size(2) == 3 && weight.size(3) == 3,
                "conv3x3_single_channel: expected weight [C, 1, 3, 3], got ", weight.sizes());
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0),
                "conv3x3_single_channel: bias ", bias.sizes(), " does not match weight ", weight.sizes());
    const std::int64_t n = x.size(0), h = x.size(2), w = x.size(3), c_out = weight.size(0);
    const std::int64_t pw = w + 2, plane = (h + 2) * pw;
    const at::Tensor xp = pad_images(x);
    const at::Tensor wc = weight.contiguous(), bc = bias.contiguous();
    at::Tensor out = at::empty({n, c_out, h, w}, x.options());
    const float* xp_p = xp.data_ptr<float>();
    const float* w_p = wc.data_ptr<float>();
    const float* b_p = bc.data_ptr<float>();
    float* out_p = out.data_ptr<float>();

    at::parallel_for(0, n * c_out, 16, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t nc = begin; nc < end; ++nc) {
        const std::int64_t s = nc / c_out, c = nc % c_out;
        const float* k = w_p + c * 9;
        const float b = b_p[c];
        const float* src = xp_p + s * plane;
        float* dst = out_p + nc * h * w;
        for (std::int64_t i = 0; i < h; ++i) {
          const float* r0 = src + i * pw;
          const float* r1 = r0 + pw;
          const float* r2 = r1 + pw;
          float* o = dst + i * w;
          for (std::int64_t j = 0; j < w; ++j) {
            o[j] = b + k[0] * r0[j] + k[1] * r0[j + 1] + k[2] * r0[j + 2] + k[3] * r1[j] +
                   k[4] * r1[j + 1] + k[5] * r1[j + 2] + k[6] * r2[j] + k[7] * r2[j + 1] +
                   k[8] * r2[j + 2];
          }
        }
      }
    });
    ctx->save_for_backward({x, weight});
    ctx->saved_data["xp"] = xp;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor xp = ctx->saved_data["xp"].toTensor();
    const at::Tensor g = grads[0].contiguous();
    const std::int64_t n = g.size(0), c_out = g.size(1), h = g.size(2), w = g.size(3);
    const std::int64_t pw = w + 2, plane = (h + 2) * pw;

    at::Tensor gw = at::empty({c_out, 1, 3, 3}, g.options());
    at::Tensor gb = at::empty({c_out}, g.options());
    const float* g_p = g.data_ptr<float>();
    const float* xp_p = xp.data_ptr<float>();
    float* gw_p = gw.data_ptr<float>();
    float* gb_p = gb.data_ptr<float>();

    // One output channel per task: a fixed summation order per channel.
    // kLanes independent partial sums per tap let the compiler vectorize
    // the row loop without reassociating floating-point additions.
    constexpr int kLanes = 8;
    at::parallel_for(0, c_out, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) {
        float acc[10][kLanes] = {};
        for (std::int64_t s = 0; s < n; ++s) {
          const float* src = xp_p + s * plane;
          const float* gp = g_p + (s * c_out + c) * h * w;
          for (std::int64_t i = 0; i < h; ++i) {
            const float* rows[3] = {src + i * pw, src + (i + 1) * pw, src + (i + 2) * pw};
            const float* gr = gp + i * w;
            std::int64_t j = 0;
            for (; j + kLanes <= w; j += kLanes) {
              for (int l = 0; l < kLanes; ++l) {
                const float gv = gr[j + l];
                acc[9][l] += gv;
                for (int t = 0; t < 9; ++t) acc[t][l] += gv * rows[t / 3][j + l + t % 3];
              }
            }
            for (; j < w; ++j) {
              const float gv = gr[j];
              acc[9][0] += gv;
              for (int t = 0; t < 9; ++t) acc[t][0] += gv * rows[t / 3][j + t % 3];
            }
          }
        }
        for (int t = 0; t < 10; ++t) {
          float sum = 0;
          for (int l = 0; l < kLanes; ++l) sum += acc[t][l];
          if (t < 9) gw_p[c * 9 + t] = sum;
          else gb_p[c] = sum;
        }
      }
    });

    at::Tensor gx;
    if (x.requires_grad()) gx = at::conv_transpose2d(g, weight, {}, 1, 1);
    return {gx, gw, gb};
  }
};

}  // namespace

at::Tensor conv3x3_single_channel(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return Conv3x3SingleChannel::apply(x, weight, bias);
}

}  // namespace ddp::fashion
