#include "ddp/fashion/linear_sgemm.h"

#include <torch/torch.h>

#include <cstdint>
#include <dlfcn.h>

namespace ddp::fashion {
namespace {

// oneDNN's C API (dnnl.h, stable since 1.0): C := alpha * op(A) * op(B) +
// beta * C on row-major matrices, op(X) = X or X^T as trans is 'N' or 'T';
// returns dnnl_success (0) or an error status.
using Sgemm = int (*)(char transa, char transb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                      const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                      std::int64_t ldc);

Sgemm sgemm() {
  static const Sgemm f = reinterpret_cast<Sgemm>(::dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
  return f;
}

// c[m, n] = op(a) * op(b) + beta * c, all contiguous row-major float32;
// `ta` / `tb`: a / b is stored transposed ([k, m] / [n, k]).
void gemm(bool ta, bool tb, const at::Tensor& a, const at::Tensor& b, float beta, at::Tensor& c) {
  const std::int64_t m = c.size(0), n = c.size(1), k = ta ? a.size(0) : a.size(1);
  const int status = sgemm()(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a.data_ptr<float>(), a.size(1),
                             b.data_ptr<float>(), b.size(1), beta, c.data_ptr<float>(), n);
  TORCH_CHECK(status == 0, "linear_sgemm: dnnl_sgemm(", m, "x", n, "x", k, ") failed with oneDNN status ", status);
}

class LinearSgemm : public torch::autograd::Function<LinearSgemm> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
    TORCH_CHECK(sgemm(), "linear_sgemm: this process has no oneDNN dnnl_sgemm (see onednn_sgemm_available())");
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat &&
                    bias.scalar_type() == at::kFloat,
                "linear_sgemm: CPU float32 tensors only, got ", x.device(), " ", x.scalar_type());
    TORCH_CHECK(x.dim() >= 2 && weight.dim() == 2 && bias.dim() == 1 && bias.size(0) == weight.size(0) &&
                    x.numel() == x.size(0) * weight.size(1),
                "linear_sgemm: input ", x.sizes(), " does not match a Linear weight ", weight.sizes(), " and bias ",
                bias.sizes());
    const at::Tensor x2 = x.reshape({x.size(0), weight.size(1)}).contiguous();
    const at::Tensor w = weight.contiguous();
    at::Tensor y = bias.unsqueeze(0).expand({x.size(0), weight.size(0)}).contiguous();
    gemm(false, true, x2, w, 1.0f, y);  // y = x w^T + bias
    ctx->save_for_backward({x2, w});
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    return y.view({x.size(0), weight.size(0), 1, 1});
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];  // [N, K]
    const at::Tensor& w = saved[1];  // [O, K]
    const at::Tensor g = grads[0].reshape({x.size(0), w.size(0)}).contiguous();  // [N, O]
    at::Tensor grad_x, grad_w, grad_b;
    if (ctx->needs_input_grad(0)) {
      grad_x = at::empty_like(x);
      gemm(false, false, g, w, 0.0f, grad_x);  // g w
      grad_x = grad_x.view(ctx->saved_data["x_sizes"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      grad_w = at::empty_like(w);
      gemm(true, false, g, x, 0.0f, grad_w);  // g^T x
    }
    if (ctx->needs_input_grad(2)) grad_b = g.sum(0);
    return {grad_x, grad_w, grad_b};
  }
};

}  // namespace

bool onednn_sgemm_available() { return sgemm() != nullptr; }

at::Tensor linear_sgemm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return LinearSgemm::apply(x, weight, bias);
}

}  // namespace ddp::fashion
