// ddp-train's model, timed: the training step with the fast forward against
// the stock layers Python uses, then each fused or replaced layer against its
// stock formulation, forward and backward; batch 64, on 1 and then 2 threads.
// Not a test (it checks nothing): docs/benchmarks.md and docs/ddp-train.md
// quote its numbers. Each time is the best of several rounds of 10 calls:
// this machine's neighbours add time, never take it away.
//   build/bin/ddp-train-model-bench
// Prints one line per measurement, in milliseconds.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "ddp/fashion/conv3x3_relu_max_pool.h"
#include "ddp/fashion/linear_as_conv.h"
#include "ddp/fashion/linear_sgemm.h"
#include "ddp/fashion/model.h"
#include "ddp/fashion/relu_max_pool.h"

namespace {

// Seconds per call of f: one warm-up call, then the best of `rounds` rounds of 10.
double best_seconds(const std::function<void()>& f, int rounds) {
  f();
  double best = 1e9;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10);
  }
  return best;
}

void run(int threads) {
  at::set_num_threads(threads);
  std::printf("%d thread(s)\n", threads);
  torch::manual_seed(5);
  ddp::fashion::FashionCnn m;
  auto x = torch::randn({64, 1, 28, 28});
  auto y = torch::randint(0, 10, {64}, torch::kLong);
  for (int fast = 0; fast < 2; ++fast) {
    const double s = best_seconds(
        [&] {
          m.zero_grad();
          torch::nn::functional::cross_entropy(fast ? m.forward(x) : m.reference_forward(x), y).backward();
        },
        3);
    std::printf("  %s %.3f ms per step\n", fast ? "fast" : "stock", s * 1000);
  }
  auto bench = [](const char* name, const std::function<void()>& f) {
    std::printf("  %s %.3f ms\n", name, best_seconds(f, 5) * 1000);
  };
  auto w = m.conv1->weight.detach().clone().requires_grad_(true);
  auto b = m.conv1->bias.detach().clone().requires_grad_(true);
  auto g = torch::randn({64, 32, 28, 28});
  auto gp1 = torch::randn({64, 32, 14, 14});
  bench("conv1+relu+pool fused fwd+bwd", [&] { ddp::fashion::conv3x3_relu_max_pool2x2(x, w, b).backward(gp1); });
  bench("conv1+relu+pool fused fwd", [&] { ddp::fashion::conv3x3_relu_max_pool2x2(x, w.detach(), b.detach()); });
  bench("conv1+relu+pool stock fwd+bwd",
        [&] { torch::max_pool2d(torch::relu(torch::conv2d(x, w, b, 1, 1)), 2).backward(gp1); });
  bench("conv1 stock fwd+bwd", [&] { torch::conv2d(x, w, b, 1, 1).backward(g); });
  auto c2 = torch::randn({64, 32, 14, 14}, torch::requires_grad());
  auto w2 = m.conv2->weight.detach().clone().requires_grad_(true);
  auto b2 = m.conv2->bias.detach().clone().requires_grad_(true);
  auto g2 = torch::randn({64, 64, 14, 14});
  bench("conv2 stock fwd+bwd", [&] { torch::autograd::grad({torch::conv2d(c2, w2, b2, 1, 1)}, {c2, w2, b2}, {g2}); });
  // The model runs conv2 on channels-last memory (model.cpp): no reorders
  // to and from oneDNN's blocked layout.
  auto c2_last = c2.detach().contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
  auto g2_last = g2.contiguous(at::MemoryFormat::ChannelsLast);
  bench("conv2 stock fwd+bwd, channels last",
        [&] { torch::autograd::grad({torch::conv2d(c2_last, w2, b2, 1, 1)}, {c2_last, w2, b2}, {g2_last}); });
  auto f = torch::randn({64, 64, 7, 7}, torch::requires_grad());
  auto fw = m.fc1->weight.detach().clone().requires_grad_(true);
  auto fb = m.fc1->bias.detach().clone().requires_grad_(true);
  auto gf = torch::randn({64, 128, 1, 1});
  bench("fc1 linear_as_conv fwd+bwd", [&] { ddp::fashion::linear_as_conv(f, fw, fb).backward(gf); });
  if (ddp::fashion::onednn_sgemm_available())
    bench("fc1 linear_sgemm fwd+bwd", [&] { ddp::fashion::linear_sgemm(f, fw, fb).backward(gf); });
  bench("fc1 stock conv2d fwd+bwd", [&] { torch::conv2d(f, fw.view({128, 64, 7, 7}), fb).backward(gf); });
  auto h = torch::randn({64, 32, 28, 28}, torch::requires_grad());
  auto gp = torch::randn({64, 32, 14, 14});
  bench("relu+pool fused fwd+bwd", [&] { ddp::fashion::relu_max_pool2x2(h).backward(gp); });
  bench("relu+pool stock fwd+bwd", [&] { torch::max_pool2d(torch::relu(h), 2).backward(gp); });
  // After conv2, as the model has it: [64, 64, 14, 14], in both layouts.
  auto h2 = torch::randn({64, 64, 14, 14}, torch::requires_grad());
  auto h2_last = h2.detach().contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
  auto gp2 = torch::randn({64, 64, 7, 7});
  // The input's gradient as the model's conv2 gets it, not summed into a
  // leaf's .grad.
  bench("relu+pool after conv2 fused fwd+bwd",
        [&] { torch::autograd::grad({ddp::fashion::relu_max_pool2x2(h2)}, {h2}, {gp2}); });
  bench("relu+pool after conv2 fused fwd+bwd, channels last",
        [&] { torch::autograd::grad({ddp::fashion::relu_max_pool2x2(h2_last)}, {h2_last}, {gp2}); });
}

}  // namespace

int main() {
  for (int threads : {1, 2}) run(threads);
  return 0;
}
