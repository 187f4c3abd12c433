#include "ddp/fashion/linear_as_conv.h"

#include <torch/torch.h>

namespace ddp::fashion {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class LinearAsConv : public torch::autograd::Function<LinearAsConv> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    TORCH_CHECK(x.dim() == 4 && weight.dim() == 2 && weight.size(1) == x.size(1) * x.size(2) * x.size(3),
                "linear_as_conv: input ", x.sizes(), " does not match a Linear weight ", weight.sizes());
    const at::Tensor kernel = weight.view({weight.size(0), x.size(1), x.size(2), x.size(3)});
    ctx->save_for_backward({x, weight});
    return at::conv2d(x, kernel, bias);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const std::int64_t n = x.size(0), o = weight.size(0), k = weight.size(1);
    const at::Tensor g = grads[0].contiguous();  // [N, O, 1, 1]
    at::Tensor grad_x, grad_w, grad_b;
    if (ctx->needs_input_grad(0)) {
      const at::Tensor kernel = weight.view({o, x.size(1), x.size(2), x.size(3)});
      grad_x = std::get<0>(at::convolution_backward(g, x, kernel, at::OptionalIntArrayRef{}, {1, 1}, {0, 0}, {1, 1}, false,
                                                    {0, 0}, 1, {true, false, false}));
    }
    if (ctx->needs_input_grad(1)) {
      // grad_w[o, k] = sum over n of g[n, o] * x[n, k]: a 1x1 convolution
      // of a batch of O one-pixel images with N channels (g transposed) by
      // K filters of N channels (x transposed); its output [O, K, 1, 1] is
      // the weight's layout.
      const at::Tensor g_t = g.view({n, o}).t().contiguous().view({o, n, 1, 1});
      const at::Tensor x_t = x.reshape({n, k}).t().contiguous().view({k, n, 1, 1});
      grad_w = at::conv2d(g_t, x_t).view({o, k});
    }
    if (ctx->needs_input_grad(2)) grad_b = g.view({n, o}).sum(0);
    return {grad_x, grad_w, grad_b};
  }
};

}  // namespace

at::Tensor linear_as_conv(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return LinearAsConv::apply(x, weight, bias);
}

}  // namespace ddp::fashion
