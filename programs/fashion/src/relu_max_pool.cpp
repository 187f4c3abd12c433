#include "ddp/fashion/relu_max_pool.h"

#include <torch/torch.h>

#include <cstdint>

#include "pool_windows.h"

namespace ddp::fashion {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using pool_windows::pool_row;
using pool_windows::unpool_plane;

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
    at::parallel_for(0, planes * oh, 64, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {  // output rows of all planes
        const float* r0 = in_p + (r / oh) * h * w + (r % oh) * 2 * w;
        pool_row(r0, r0 + w, ow, out_p + r * ow, arg_p + r * ow);
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
    at::Tensor grad_in = at::empty({arg.size(0), arg.size(1), h, w}, g.options());
    const float* g_p = g.data_ptr<float>();
    const std::uint8_t* arg_p = arg.data_ptr<std::uint8_t>();
    float* gi_p = grad_in.data_ptr<float>();
    at::parallel_for(0, planes, 8, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t p = begin; p < end; ++p)
        unpool_plane(g_p + p * oh * ow, arg_p + p * oh * ow, oh, ow, h, w, gi_p + p * h * w);
    });
    return {grad_in};
  }
};

}  // namespace

at::Tensor relu_max_pool2x2(const at::Tensor& x) { return ReluMaxPool2x2::apply(x); }

}  // namespace ddp::fashion
