#include "ddp/fashion/relu_max_pool.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdint>

namespace ddp::fashion {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Window position of the maximum: 0..3 in row-major order, kNone when the
// maximum is <= 0 (relu's output and gradient are 0 there).
constexpr std::uint8_t kNone = 4;

// A window holding a NaN (rare: a diverged run): max_pool2d's rule (a NaN
// replaces whatever came before it, so the last NaN wins) and relu's (NaN
// passes, its gradient too).
void nan_window(const float (&v)[4], float& out, std::uint8_t& arg) {
  std::uint8_t k = 3;
  while (!std::isnan(v[k])) --k;
  out = v[k];
  arg = k;
}

class ReluMaxPool2x2 : public torch::autograd::Function<ReluMaxPool2x2> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input) {
    TORCH_CHECK(input.dim() == 4 && input.scalar_type() == at::kFloat,
                "relu_max_pool2x2: expected a float [N, C, H, W] tensor, got ", input.sizes(), " ",
                input.scalar_type());
    const at::Tensor x = input.contiguous();
    const std::int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
    const std::int64_t oh = h / 2, ow = w / 2;
    TORCH_CHECK(oh > 0 && ow > 0, "relu_max_pool2x2: input ", x.sizes(), " is smaller than 2x2");
    at::Tensor out = at::empty({x.size(0), x.size(1), oh, ow}, x.options());
    at::Tensor arg = at::empty({x.size(0), x.size(1), oh, ow}, x.options().dtype(at::kByte));
    const float* in_p = x.data_ptr<float>();
    float* out_p = out.data_ptr<float>();
    std::uint8_t* arg_p = arg.data_ptr<std::uint8_t>();

    at::parallel_for(0, planes, 8, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p) {
        const float* src = in_p + p * h * w;
        float* dst = out_p + p * oh * ow;
        std::uint8_t* a = arg_p + p * oh * ow;
        for (std::int64_t i = 0; i < oh; ++i) {
          const float* r0 = src + (2 * i) * w;
          const float* r1 = r0 + w;
          for (std::int64_t j = 0; j < ow; ++j) {
            const float v[4] = {r0[2 * j], r0[2 * j + 1], r1[2 * j], r1[2 * j + 1]};
            if (__builtin_expect(std::isnan(v[0]) | std::isnan(v[1]) | std::isnan(v[2]) | std::isnan(v[3]), 0)) {
              nan_window(v, dst[i * ow + j], a[i * ow + j]);
              continue;
            }
            // max_pool2d's rule: strictly greater replaces. Selects, not
            // branches: which of 4 random values wins is unpredictable, and
            // the mispredicted branches cost more than the comparisons.
            float best = v[0];
            std::uint8_t k = 0;
            k = v[1] > best ? 1 : k, best = v[1] > best ? v[1] : best;
            k = v[2] > best ? 2 : k, best = v[2] > best ? v[2] : best;
            k = v[3] > best ? 3 : k, best = v[3] > best ? v[3] : best;
            const bool pass = best > 0.0f;
            dst[i * ow + j] = pass ? best : 0.0f;
            a[i * ow + j] = pass ? k : kNone;
          }
        }
      }
    });
    ctx->saved_data["arg"] = arg;
    ctx->saved_data["h"] = h;
    ctx->saved_data["w"] = w;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const at::Tensor arg = ctx->saved_data["arg"].toTensor();
    const std::int64_t h = ctx->saved_data["h"].toInt(), w = ctx->saved_data["w"].toInt();
    const at::Tensor g = grads[0].contiguous();
    const std::int64_t planes = arg.size(0) * arg.size(1), oh = arg.size(2), ow = arg.size(3);
    at::Tensor grad_in = at::zeros({arg.size(0), arg.size(1), h, w}, g.options());
    const float* g_p = g.data_ptr<float>();
    const std::uint8_t* arg_p = arg.data_ptr<std::uint8_t>();
    float* gi_p = grad_in.data_ptr<float>();
    at::parallel_for(0, planes, 8, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p) {
        const float* src = g_p + p * oh * ow;
        const std::uint8_t* a = arg_p + p * oh * ow;
        float* dst = gi_p + p * h * w;
        for (std::int64_t i = 0; i < oh; ++i) {
          for (std::int64_t j = 0; j < ow; ++j) {
            const std::uint8_t k = a[i * ow + j];
            if (k == kNone) continue;
            dst[(2 * i + (k >> 1)) * w + 2 * j + (k & 1)] = src[i * ow + j];
          }
        }
      }
    });
    return {grad_in};
  }
};

}  // namespace

at::Tensor relu_max_pool2x2(const at::Tensor& x) { return ReluMaxPool2x2::apply(x); }

}  // namespace ddp::fashion
