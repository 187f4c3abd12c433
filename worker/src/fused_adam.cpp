#include "ddp/worker/fused_adam.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

namespace ddp::worker {
namespace {

// One element range of the update, with Adam::step's formula:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= step_size * m / (sqrt(v) / sqrt(bc2) + eps)
// Vectorized: this file is compiled with -O3 -fno-math-errno (CMake), since
// with errno semantics every sqrt is a call to sqrtf and the loop stays
// scalar (then no faster than Adam's six vectorized passes: measured), and
// an AVX2 clone is picked at load time on CPUs that have it (GCC's
// target_clones; SSE2 elsewhere).
#if defined(__x86_64__) && !defined(__clang__)
#define DDP_ADAM_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define DDP_ADAM_KERNEL
#endif
// With `zero`, g is zeroed behind the update, while its cache line is
// still there (a template argument: each loop stays branch-free).
template <bool zero>
DDP_ADAM_KERNEL void adam_range(float* __restrict p, float* __restrict g, float* __restrict m,
                                float* __restrict v, std::int64_t n, float b1, float b2, float step_size,
                                float inv_sqrt_bc2, float eps) {
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = m[i] * b1 + gi * c1;
    const float vi = v[i] * b2 + gi * gi * c2;
    m[i] = mi;
    v[i] = vi;
    p[i] -= step_size * (mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps));
    if constexpr (zero) g[i] = 0.0f;
  }
}

// The state map's key: the TensorImpl's address as text in LibTorch 1.x,
// the address itself in 2.x.
template <class Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what 1.x's c10::guts::to_string writes
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else
    return p.unsafeGetTensorImpl();
}

bool fusable(const torch::Tensor& p, const torch::Tensor& g, const torch::optim::AdamParamState& s) {
  const auto ok = [&](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous() && t.layout() == torch::kStrided &&
           t.numel() == p.numel();
  };
  return ok(p) && ok(g) && ok(s.exp_avg()) && ok(s.exp_avg_sq());
}

}  // namespace

torch::optim::AdamParamState& FusedAdam::state_of(const torch::Tensor& p) {
  const auto key = state_key<typename std::decay_t<decltype(state_)>::key_type>(p);
  auto it = state_.find(key);
  if (it == state_.end()) {
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->step(0);
    s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = state_.emplace(key, std::move(s)).first;
  }
  return static_cast<torch::optim::AdamParamState&>(*it->second);
}

torch::Tensor FusedAdam::step(LossClosure closure) { return fused_step(closure, false); }

torch::Tensor FusedAdam::step_and_zero_grad(LossClosure closure) { return fused_step(closure, true); }

torch::Tensor FusedAdam::fused_step(LossClosure closure, bool zero_grad) {
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    if (o.weight_decay() != 0 || o.amsgrad()) {
      torch::Tensor loss = torch::optim::Adam::step(closure);
      if (zero_grad) {
        torch::NoGradGuard no_grad;
        for (auto& g : param_groups_)
          for (auto& p : g.params())
            if (p.grad().defined()) p.mutable_grad().zero_();
      }
      return loss;
    }
  }
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      auto& s = state_of(p);
      s.step(s.step() + 1);
      const double bc1 = 1 - std::pow(beta1, static_cast<double>(s.step()));
      const double bc2 = 1 - std::pow(beta2, static_cast<double>(s.step()));
      const double step_size = o.lr() / bc1;
      if (!fusable(p, grad, s)) {  // Adam::step's operations
        s.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
        s.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
        auto denom = (s.exp_avg_sq().sqrt() / std::sqrt(bc2)).add_(o.eps());
        p.addcdiv_(s.exp_avg(), denom, -step_size);
        if (zero_grad) p.mutable_grad().zero_();
        continue;
      }
      float* pp = p.data_ptr<float>();
      float* gp = grad.data_ptr<float>();
      float* mp = s.exp_avg().data_ptr<float>();
      float* vp = s.exp_avg_sq().data_ptr<float>();
      const auto b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
      const auto ss = static_cast<float>(step_size), inv = static_cast<float>(1.0 / std::sqrt(bc2));
      const auto eps = static_cast<float>(o.eps());
      const auto body = [&](std::int64_t begin, std::int64_t end) {
        if (zero_grad) adam_range<true>(pp + begin, gp + begin, mp + begin, vp + begin, end - begin, b1, b2, ss, inv, eps);
        else adam_range<false>(pp + begin, gp + begin, mp + begin, vp + begin, end - begin, b1, b2, ss, inv, eps);
      };
      if (parallel_for_) parallel_for_(p.numel(), body);
      else at::parallel_for(0, p.numel(), 1 << 15, body);
    }
  }
  return loss;
}

}  // namespace ddp::worker
