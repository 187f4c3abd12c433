// The model's fast forward (fused relu+max-pool kernel, Linear layers as
// oneDNN convolutions) computes the model: same values and gradients
// as the stock layers Python uses.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "ddp/train/conv3x3_single_channel.h"
#include "ddp/train/model.h"
#include "ddp/train/relu_max_pool.h"

using ddp::train::FashionCnn;
using ddp::train::relu_max_pool2x2;

TEST_CASE("relu_max_pool2x2 equals max_pool2d(relu(x), 2) bit for bit", "[train][model]") {
  torch::manual_seed(1);
  for (auto shape : {std::vector<int64_t>{4, 3, 8, 8}, std::vector<int64_t>{2, 5, 7, 9}}) {
    // Few distinct values, many of them <= 0: ties and dead windows happen.
    auto base = torch::randint(-3, 4, shape).to(torch::kFloat);
    auto a = base.clone().requires_grad_(true);
    auto b = base.clone().requires_grad_(true);
    auto ya = relu_max_pool2x2(a);
    auto yb = torch::max_pool2d(torch::relu(b), 2);
    REQUIRE(ya.sizes() == yb.sizes());
    CHECK(torch::equal(ya, yb));
    auto g = torch::randn(ya.sizes());
    ya.backward(g);
    yb.backward(g);
    CHECK(torch::equal(a.grad(), b.grad()));
  }
  CHECK_THROWS(relu_max_pool2x2(torch::zeros({1, 1, 1, 4})));
  CHECK_THROWS(relu_max_pool2x2(torch::zeros({1, 4, 4})));
}

TEST_CASE("FashionCnn::forward computes the stock-layer model", "[train][model]") {
  torch::manual_seed(2);
  FashionCnn m;
  CHECK(m.named_parameters().size() == 8);
  CHECK(m.fc1->weight.sizes() == torch::IntArrayRef({128, 3136}));
  auto x = torch::randn({16, 1, 28, 28});
  auto fast = m.forward(x);
  CHECK(fast.sizes() == torch::IntArrayRef({16, 10}));
  auto ref = m.reference_forward(x);
  CHECK(torch::allclose(fast, ref, 1e-4, 1e-5));

  auto grads = [&](bool use_fast) {
    m.zero_grad();
    torch::manual_seed(3);
    auto target = torch::randint(0, 10, {16}, torch::kLong);
    auto loss = torch::nn::functional::cross_entropy(use_fast ? m.forward(x) : m.reference_forward(x), target);
    loss.backward();
    std::vector<torch::Tensor> out;
    for (auto& p : m.parameters()) out.push_back(p.grad().clone());
    return out;
  };
  auto gf = grads(true), gr = grads(false);
  for (size_t i = 0; i < gf.size(); ++i) {
    INFO("parameter " << i);
    CHECK(torch::allclose(gf[i], gr[i], 1e-4, 1e-6));
  }
}

TEST_CASE("conv3x3_single_channel matches conv2d(padding 1) with gradients", "[train][model]") {
  torch::manual_seed(4);
  auto x = torch::randn({5, 1, 9, 13});  // widths not a multiple of the 8 lanes
  auto w = torch::randn({6, 1, 3, 3}, torch::requires_grad());
  auto b = torch::randn({6}, torch::requires_grad());
  auto w2 = w.detach().clone().requires_grad_(true);
  auto b2 = b.detach().clone().requires_grad_(true);
  auto fast = ddp::train::conv3x3_single_channel(x, w, b);
  auto ref = torch::conv2d(x, w2, b2, 1, 1);
  CHECK(torch::allclose(fast, ref, 1e-5, 1e-5));
  auto g = torch::randn(fast.sizes());
  fast.backward(g);
  ref.backward(g);
  CHECK(torch::allclose(w.grad(), w2.grad(), 1e-4, 1e-4));
  CHECK(torch::allclose(b.grad(), b2.grad(), 1e-4, 1e-4));

  auto xg = x.clone().requires_grad_(true);
  auto xg2 = x.clone().requires_grad_(true);
  ddp::train::conv3x3_single_channel(xg, w.detach(), b.detach()).backward(g);
  torch::conv2d(xg2, w.detach(), b.detach(), 1, 1).backward(g);
  CHECK(torch::allclose(xg.grad(), xg2.grad(), 1e-4, 1e-5));
  CHECK_THROWS(ddp::train::conv3x3_single_channel(torch::zeros({1, 2, 4, 4}), w, b));
}

// Not run by default (hidden tag): prints the time per training step of the
// fast forward vs the stock layers, 1 and 2 threads, batch 64.
TEST_CASE("model step time, fast vs stock layers", "[.][bench]") {
  const int threads = GENERATE(1, 2);
  at::set_num_threads(threads);
  WARN(threads << " thread(s)");
  torch::manual_seed(5);
  FashionCnn m;
  auto x = torch::randn({64, 1, 28, 28});
  auto y = torch::randint(0, 10, {64}, torch::kLong);
  for (int fast = 0; fast < 2; ++fast) {
    auto step = [&] {
      m.zero_grad();
      torch::nn::functional::cross_entropy(fast ? m.forward(x) : m.reference_forward(x), y).backward();
    };
    step();
    double best = 1e9;
    for (int r = 0; r < 3; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 10; ++i) step();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10);
    }
    WARN((fast ? "fast " : "stock ") << best * 1000 << " ms per step");
  }
  auto bench = [&](const char* name, const std::function<void()>& f) {
    f();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) f();
    WARN(name << " " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 100 << " ms");
  };
  auto w = m.conv1->weight.detach().clone().requires_grad_(true);
  auto b = m.conv1->bias.detach().clone().requires_grad_(true);
  auto g = torch::randn({64, 32, 28, 28});
  bench("conv1 direct fwd+bwd", [&] { ddp::train::conv3x3_single_channel(x, w, b).backward(g); });
  bench("conv1 stock fwd+bwd", [&] { torch::conv2d(x, w, b, 1, 1).backward(g); });
  auto h = torch::randn({64, 32, 28, 28}, torch::requires_grad());
  auto gp = torch::randn({64, 32, 14, 14});
  bench("relu+pool fused fwd+bwd", [&] { ddp::train::relu_max_pool2x2(h).backward(gp); });
  bench("relu+pool stock fwd+bwd", [&] { torch::max_pool2d(torch::relu(h), 2).backward(gp); });
}
