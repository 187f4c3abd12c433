// The model's fast forward (fused relu+max-pool kernel, Linear layers as
// oneDNN convolutions) computes the model: same values and gradients
// as the stock layers Python uses.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include "ddp/fashion/conv3x3_relu_max_pool.h"
#include "ddp/fashion/linear_as_conv.h"
#include "ddp/fashion/linear_sgemm.h"
#include "ddp/fashion/model.h"
#include "ddp/fashion/relu_max_pool.h"
#include "numerics.h"
#include "test_skip.h"

#include <optional>

using ddp::fashion::FashionCnn;
using ddp::fashion::relu_max_pool2x2;

TEST_CASE("relu_max_pool2x2 equals max_pool2d(relu(x), 2) bit for bit", "[train][model][numerics]") {
  torch::manual_seed(1);
  // Output widths 1 to 14 (the kernel takes 4 windows at a time: fewer than
  // 4, a multiple of 4, and the rest), odd heights and widths.
  for (auto shape : {std::vector<int64_t>{4, 3, 8, 8}, std::vector<int64_t>{2, 5, 7, 9}, std::vector<int64_t>{1, 1, 2, 2},
                     std::vector<int64_t>{3, 2, 5, 17}, std::vector<int64_t>{2, 3, 6, 14}, std::vector<int64_t>{2, 2, 5, 11},
                     std::vector<int64_t>{1, 3, 4, 29}, std::vector<int64_t>{2, 2, 4, 10}}) {
    // Few distinct values, many of them <= 0: ties and dead windows happen.
    const auto values = torch::randint(-3, 4, shape).to(torch::kFloat);
    const auto g = torch::randn({shape[0], shape[1], shape[2] / 2, shape[3] / 2});
    // NCHW, and channels last (the windows pool across channels then: 1, 2,
    // 3 and 5 channels take the one-at-a-time tail).
    for (const auto layout : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
      INFO("shape " << c10::IntArrayRef(shape) << ", " << layout);
      const auto base = values.contiguous(layout);
      auto a = base.clone(layout).requires_grad_(true);
      auto b = base.clone(layout).requires_grad_(true);
      auto ya = relu_max_pool2x2(a);
      auto yb = torch::max_pool2d(torch::relu(b), 2);
      REQUIRE(ya.sizes() == yb.sizes());
      CHECK(ya.is_contiguous());
      CHECK(torch::equal(ya, yb));
      // The gradient as the function returns it (a leaf's .grad would be
      // made to match a's layout whatever it returned): in the input's
      // layout, so conv2's backward reads it without a reorder.
      const auto ga = torch::autograd::grad({ya}, {a}, {g})[0];
      yb.backward(g);
      CHECK(ga.is_contiguous(layout));
      CHECK(torch::equal(ga, b.grad()));
    }
  }
  CHECK_THROWS(relu_max_pool2x2(torch::zeros({1, 1, 1, 4})));
  CHECK_THROWS(relu_max_pool2x2(torch::zeros({1, 4, 4})));
}

namespace {

// relu_max_pool2x2 against max_pool2d(relu(x), 2) on an input holding NaNs:
// NaN in the same outputs, the other outputs and every gradient equal.
void check_nan_rule_in(const at::Tensor& base, at::MemoryFormat layout) {
  auto a = base.clone(layout).requires_grad_(true);
  auto b = base.clone(layout).requires_grad_(true);
  auto ya = relu_max_pool2x2(a);
  auto yb = torch::max_pool2d(torch::relu(b), 2);
  REQUIRE(ya.sizes() == yb.sizes());
  CHECK(torch::equal(ya.isnan(), yb.isnan()));
  CHECK(ya.isnan().any().item<bool>());
  CHECK(torch::equal(torch::nan_to_num(ya, 0.0), torch::nan_to_num(yb, 0.0)));
  auto g = torch::randn(ya.sizes());
  ya.backward(g);
  yb.backward(g);
  CHECK(torch::equal(a.grad(), b.grad()));
}

// The same in NCHW and channels-last memory.
void check_nan_rule(const at::Tensor& values) {
  for (const auto layout : {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast}) {
    INFO(layout);
    check_nan_rule_in(values.contiguous(layout), layout);
  }
}

}  // namespace

TEST_CASE("relu_max_pool2x2 passes NaN as max_pool2d(relu(x), 2) does: the last NaN of a window wins",
          "[train][model][numerics]") {
  torch::manual_seed(2);
  auto base = torch::randint(-3, 4, {2, 3, 6, 8}).to(torch::kFloat);
  // A NaN at every position of a window, alone and after another.
  auto flat = base.view({-1});
  for (int64_t i : {0, 9, 18, 27, 40, 41, 49, 56, 57, 96, 105, 160, 161}) flat[i] = NAN;
  check_nan_rule(base);
}

TEST_CASE("relu_max_pool2x2 passes NaN in wide rows too: only the row holding it changes rule",
          "[train][model][numerics]") {
  torch::manual_seed(3);
  for (int64_t width : {14, 22, 28}) {
    INFO("width " << width);
    auto base = torch::randint(-3, 4, {2, 2, 6, width}).to(torch::kFloat);
    auto flat = base.view({-1});
    const auto at = torch::randperm(flat.numel()).slice(0, 0, 12);
    for (int64_t q = 0; q < at.numel(); ++q) flat[at[q].item<int64_t>()] = NAN;
    check_nan_rule(base);
  }
}

TEST_CASE("relu_max_pool2x2 on channels last passes NaN in the 4-channel lanes: all of that pixel's channels change rule",
          "[train][model][numerics]") {
  torch::manual_seed(4);
  // 9 channels: two groups of 4 and a tail of one.
  auto base = torch::randint(-3, 4, {2, 9, 6, 6}).to(torch::kFloat).contiguous(at::MemoryFormat::ChannelsLast);
  auto flat = base.permute({0, 2, 3, 1}).reshape({-1});  // memory order
  for (int64_t i : {0, 9, 13, 54, 63, 70, 71, 200, 333, 500, 647}) flat[i] = NAN;
  base = flat.view({2, 6, 6, 9}).permute({0, 3, 1, 2});
  REQUIRE(base.is_contiguous(at::MemoryFormat::ChannelsLast));
  check_nan_rule_in(base, at::MemoryFormat::ChannelsLast);
}

namespace {

using LinearFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&);

// linear(x, weight, bias) as [N, O, 1, 1] against a float64 linear:
// values, and the gradients asked for (the input's, or not).
void check_linear(LinearFn linear) {
  using ddp::test::float32_tolerance;
  using ddp::test::relative_error;
  torch::manual_seed(6);
  const std::int64_t n = 5, c = 3, h = 4, w = 6, o = 7, k = c * h * w;
  const auto x = torch::randn({n, c, h, w}), weight = torch::randn({o, k}), bias = torch::randn({o});
  const auto g = torch::randn({n, o, 1, 1});
  auto x64 = x.to(torch::kDouble).requires_grad_(true), w64 = weight.to(torch::kDouble).requires_grad_(true),
       b64 = bias.to(torch::kDouble).requires_grad_(true);
  const auto ref = torch::linear(x64.flatten(1), w64, b64);
  ref.backward(g.view({n, o}).to(torch::kDouble));
  for (const bool input_grad : {true, false}) {
    INFO("input needs a gradient: " << input_grad);
    auto xf = x.clone().requires_grad_(input_grad), wf = weight.clone().requires_grad_(true),
         bf = bias.clone().requires_grad_(true);
    const auto out = linear(xf, wf, bf);
    REQUIRE(out.sizes() == c10::IntArrayRef({n, o, 1, 1}));
    out.backward(g);
    CHECK(relative_error(out.detach().view({n, o}), ref.detach()) <= float32_tolerance(k));
    CHECK(relative_error(wf.grad(), w64.grad()) <= float32_tolerance(n));
    CHECK(relative_error(bf.grad(), b64.grad()) <= float32_tolerance(n));
    if (input_grad) {
      REQUIRE(xf.grad().sizes() == x.sizes());
      CHECK(relative_error(xf.grad(), x64.grad()) <= float32_tolerance(o));
    } else {
      CHECK_FALSE(xf.grad().defined());
    }
  }
  CHECK_THROWS(linear(x, torch::zeros({o, k + 1}), bias));
}

}  // namespace

TEST_CASE("linear_as_conv equals a float64 linear, values and the gradients asked for",
          "[train][model][numerics]") {
  check_linear(ddp::fashion::linear_as_conv);
}

TEST_CASE("linear_sgemm (oneDNN's GEMM) equals a float64 linear, values and the gradients asked for",
          "[train][model][numerics]") {
  // Debian's LibTorch loads libdnnl.so.2; the PyPI wheels keep oneDNN's
  // symbols inside (the model then runs fc1 as linear_as_conv).
  if (!ddp::fashion::onednn_sgemm_available()) DDP_SKIP("this LibTorch exports no oneDNN dnnl_sgemm");
  check_linear(ddp::fashion::linear_sgemm);
  CHECK_THROWS(ddp::fashion::linear_sgemm(torch::zeros({2, 3}, torch::kDouble), torch::zeros({4, 3}, torch::kDouble),
                                          torch::zeros({4}, torch::kDouble)));
}

namespace {

// A float64 copy of m (same parameter values).
std::shared_ptr<FashionCnn> float64_copy(FashionCnn& m) {
  auto m64 = std::make_shared<FashionCnn>();
  torch::NoGradGuard no_grad;
  auto src = m.parameters();
  auto dst = m64->parameters();
  for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  m64->to(torch::kDouble);
  return m64;
}

// The smallest distance, in a float64 run, from a decision that routes
// gradients: a 2x2 pooling window's maximum vs its runner-up, a pooled
// maximum vs relu's 0, an fc1 pre-activation vs 0. Where it is below
// float32's error, float32 may decide the other way (a tie broken
// differently), and the gradient jumps: max-pool's gradient is
// discontinuous at ties, so no tolerance can compare across one.
double decision_margin(FashionCnn& m64, const at::Tensor& x64) {
  torch::NoGradGuard no_grad;
  auto pool_margin = [](const at::Tensor& pre) {
    const auto s = pre.sizes();
    const auto windows =
        pre.view({s[0], s[1], s[2] / 2, 2, s[3] / 2, 2}).permute({0, 1, 2, 4, 3, 5}).reshape({-1, 4});
    const auto top = std::get<0>(windows.topk(2, 1));
    const auto first = top.select(1, 0), second = top.select(1, 1);
    return at::where(first > 0, first - second.clamp_min(0), first.abs()).min().item<double>();
  };
  const auto c1 = m64.conv1->forward(x64);
  const auto c2 = m64.conv2->forward(torch::max_pool2d(torch::relu(c1), 2));
  const auto f1 = m64.fc1->forward(torch::max_pool2d(torch::relu(c2), 2).flatten(1));
  return std::min({pool_margin(c1), pool_margin(c2), f1.abs().min().item<double>()});
}

// Activations are O(1) sums of conv2's 32 * 9 products: float32 gets them
// right to about this much, so a decision further away than that is taken
// the same way in float32 and float64.
const double kDecisionMargin = ddp::test::float32_tolerance(32 * 9);

std::vector<at::Tensor> gradients(FashionCnn& m, const at::Tensor& x, const at::Tensor& target, bool fast) {
  m.zero_grad();
  torch::nn::functional::cross_entropy(fast ? m.forward(x) : m.reference_forward(x), target).backward();
  std::vector<at::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.grad().clone());
  return out;
}

}  // namespace

TEST_CASE("FashionCnn::forward and its gradients equal a float64 run of the stock layers",
          "[train][model][numerics]") {
  const std::int64_t n = 4;
  // The first seed whose input keeps every routing decision clear of
  // float32's error (decided in float64, so the same seed on every CPU).
  std::optional<std::uint64_t> seed;
  for (std::uint64_t s = 0; s < 50 && !seed; ++s) {
    torch::manual_seed(s);
    FashionCnn probe;
    const auto x = torch::randn({n, 1, 28, 28});
    if (decision_margin(*float64_copy(probe), x.to(torch::kDouble)) > kDecisionMargin) seed = s;
  }
  REQUIRE(seed);
  INFO("seed " << *seed);
  torch::manual_seed(*seed);
  FashionCnn m;
  CHECK(m.named_parameters().size() == 8);
  CHECK(m.fc1->weight.sizes() == torch::IntArrayRef({128, 3136}));
  const auto x = torch::randn({n, 1, 28, 28});
  const auto target = torch::randint(0, 10, {n}, torch::kLong);
  auto m64 = float64_copy(m);
  const auto x64 = x.to(torch::kDouble);

  // Logits: fc1 sums 3136 products, the longest chain.
  const double logit_tol = ddp::test::float32_tolerance(3136);
  const auto ref64 = m64->reference_forward(x64).detach();
  CHECK(m.forward(x).sizes() == torch::IntArrayRef({n, 10}));
  CHECK(ddp::test::relative_error(m.forward(x).detach(), ref64) <= logit_tol);
  CHECK(ddp::test::relative_error(m.reference_forward(x).detach(), ref64) <= logit_tol);

  // Gradients: conv1's passes back through fc2 (128 terms), fc1 (3136),
  // conv2 (64 * 9) and sums over n * 28 * 28 positions; the errors of the
  // stages add.
  const double grad_tol = ddp::test::float32_tolerance(128) + ddp::test::float32_tolerance(3136) +
                          ddp::test::float32_tolerance(64 * 9) + ddp::test::float32_tolerance(n * 28 * 28);
  const auto g64 = gradients(*m64, x64, target, false);
  const auto fast = gradients(m, x, target, true);
  const auto stock = gradients(m, x, target, false);
  for (size_t i = 0; i < g64.size(); ++i) {
    INFO("parameter " << i << ": fast " << ddp::test::relative_error(fast[i], g64[i]) << ", stock "
                      << ddp::test::relative_error(stock[i], g64[i]) << ", tolerance " << grad_tol);
    CHECK(ddp::test::relative_error(fast[i], g64[i]) <= grad_tol);
    CHECK(ddp::test::relative_error(stock[i], g64[i]) <= grad_tol);
  }
}

// The earlier form of the test above compared the fast and stock float32
// paths on 16 images (seed 2) and failed on AVX-512 machines by 2.6e-3 in
// conv1's gradient. The cause is that input, not a kernel: one of conv2's
// pooling windows holds two values 2.2e-7 apart in float64 (0.39231613 vs
// 0.39231591), below float32's error; oneDNN's float32 conv2 rounds them to
// a tie after the stock conv1 and the other way round after the direct
// kernel, so the gradient goes to a different position (conv2.bias, a sum
// over positions, is unchanged). Both forwards are within 4.1e-7 of float64.
TEST_CASE("the old model test's input had a max-pool near-tie below float32 resolution",
          "[train][model][numerics]") {
  torch::manual_seed(2);
  FashionCnn m;
  const auto x = torch::randn({16, 1, 28, 28});
  CHECK(decision_margin(*float64_copy(m), x.to(torch::kDouble)) < kDecisionMargin);
}

TEST_CASE("conv3x3_relu_max_pool2x2 equals the stock conv2d, relu and max_pool2d at every width",
          "[train][model][numerics]") {
  using ddp::test::float32_tolerance;
  using ddp::test::relative_error;
  torch::manual_seed(4);
  const std::int64_t n = 3, c_out = 5;
  // Small integers: every convolution output is exact in float32 whatever
  // the order of its sums, so the forward must equal the stock one bit for
  // bit, ties included (first maximum wins), and the pooling decisions are
  // the float64 run's. Widths 2..17 and heights 2..5 give output rows of 1
  // to 8 windows (fewer than 4, a multiple of 4, the rest) and odd sizes.
  for (std::int64_t w = 2; w <= 17; ++w) {
    for (std::int64_t h : {2, 3, 4, 5}) {
      INFO("h " << h << " w " << w);
      const auto x = torch::randint(-3, 4, {n, 1, h, w}).to(torch::kFloat);
      const auto weight = torch::randint(-2, 3, {c_out, 1, 3, 3}).to(torch::kFloat);
      const auto bias = torch::randint(-2, 3, {c_out}).to(torch::kFloat);
      const auto g = torch::randn({n, c_out, h / 2, w / 2});

      auto xf = x.clone().requires_grad_(true), wf = weight.clone().requires_grad_(true),
           bf = bias.clone().requires_grad_(true);
      const auto out = ddp::fashion::conv3x3_relu_max_pool2x2(xf, wf, bf);
      CHECK(torch::equal(out, torch::max_pool2d(torch::relu(torch::conv2d(x, weight, bias, 1, 1)), 2)));
      out.backward(g);

      auto x64 = x.to(torch::kDouble).requires_grad_(true), w64 = weight.to(torch::kDouble).requires_grad_(true),
           b64 = bias.to(torch::kDouble).requires_grad_(true);
      const auto ref = torch::max_pool2d(torch::relu(torch::conv2d(x64, w64, b64, 1, 1)), 2);
      ref.backward(g.to(torch::kDouble));
      CHECK(relative_error(wf.grad(), w64.grad()) <= float32_tolerance(n * h * w));
      CHECK(relative_error(bf.grad(), b64.grad()) <= float32_tolerance(n * h * w));
      CHECK(relative_error(xf.grad(), x64.grad()) <= float32_tolerance(c_out * 9));
    }
  }
  CHECK_THROWS(ddp::fashion::conv3x3_relu_max_pool2x2(torch::zeros({1, 2, 4, 4}), torch::zeros({6, 1, 3, 3}),
                                                     torch::zeros({6})));
  CHECK_THROWS(ddp::fashion::conv3x3_relu_max_pool2x2(torch::zeros({1, 1, 1, 4}), torch::zeros({6, 1, 3, 3}),
                                                     torch::zeros({6})));
}

namespace {

// The convolution as conv3x3_pool_rows.h sums it, one output at a time in
// float32: the bias, then the 9 products row by row (this file is built for
// baseline x86-64, which has no fused multiply-add to contract them into).
at::Tensor conv3x3_in_kernel_order(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const std::int64_t n = x.size(0), c_out = weight.size(0), h = x.size(2), w = x.size(3);
  const auto xp = torch::constant_pad_nd(x, {1, 1, 1, 1}, 0).contiguous();
  auto out = torch::empty({n, c_out, h, w});
  const auto xa = xp.accessor<float, 4>();
  const auto wc = weight.contiguous();
  const auto wa = wc.accessor<float, 4>();
  const auto ba = bias.accessor<float, 1>();
  auto oa = out.accessor<float, 4>();
  for (std::int64_t img = 0; img < n; ++img)
    for (std::int64_t c = 0; c < c_out; ++c)
      for (std::int64_t i = 0; i < h; ++i)
        for (std::int64_t j = 0; j < w; ++j) {
          float sum = ba[c];
          for (int r = 0; r < 3; ++r)
            for (int t = 0; t < 3; ++t) sum = sum + wa[c][0][r][t] * xa[img][0][i + r][j + t];
          oa[img][c][i][j] = sum;
        }
  return out;
}

}  // namespace

TEST_CASE("conv3x3_relu_max_pool2x2 gives the same bits on every CPU: each output summed in one order",
          "[train][model][numerics]") {
  // Real-valued inputs, so another order of the sums (or a fused
  // multiply-add) changes the last bits; CTest runs this under each CPU
  // capability, which picks the kernel's 4 or 8 lanes.
  torch::manual_seed(7);
  for (const auto& hw : {std::pair<std::int64_t, std::int64_t>{28, 28}, {9, 19}, {6, 11}, {5, 6}, {4, 3}}) {
    INFO("h " << hw.first << " w " << hw.second);
    const auto x = torch::randn({2, 1, hw.first, hw.second});
    const auto weight = torch::randn({6, 1, 3, 3}), bias = torch::randn({6});
    const auto out = ddp::fashion::conv3x3_relu_max_pool2x2(x, weight, bias);
    CHECK(torch::equal(out, torch::max_pool2d(torch::relu(conv3x3_in_kernel_order(x, weight, bias)), 2)));
  }
}

TEST_CASE("conv3x3_relu_max_pool2x2 passes NaN as the stock conv2d, relu and max_pool2d do", "[train][model][numerics]") {
  torch::manual_seed(8);
  // Small integers (exact sums, as in the test above) and a few NaN pixels:
  // each spreads to the 3x3 outputs around it, and a window holding one
  // follows max_pool2d's rule; the rows without keep the vector path.
  for (std::int64_t w : {6, 28}) {
    INFO("w " << w);
    auto x = torch::randint(-3, 4, {2, 1, 8, w}).to(torch::kFloat);
    x.view({-1})[5] = NAN;
    x.view({-1})[8 * w + 3 * w + 1] = NAN;
    const auto weight = torch::randint(-2, 3, {4, 1, 3, 3}).to(torch::kFloat);
    const auto bias = torch::randint(-2, 3, {4}).to(torch::kFloat);
    const auto out = ddp::fashion::conv3x3_relu_max_pool2x2(x, weight, bias);
    const auto ref = torch::max_pool2d(torch::relu(torch::conv2d(x, weight, bias, 1, 1)), 2);
    CHECK(out.isnan().any().item<bool>());
    CHECK(torch::equal(out.isnan(), ref.isnan()));
    CHECK(torch::equal(torch::nan_to_num(out, 0.0), torch::nan_to_num(ref, 0.0)));
  }
}
