// TextCnn: the packed path ddp-text trains with computes the stock padded
// formulation's function (outputs and gradients, in float64), whatever the
// batch's padding; the unused-parameter variant under DDP; FusedAdam against
// LibTorch's Adam.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <functional>
#include <numeric>

#include "ddp/text/text_cnn.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/env.h"
#include "ddp/worker/fused_adam.h"
#include "ddp/worker/process_group.h"

using namespace ddp::text;

namespace {

// A split of `n` random sequences with lengths 1..max_len (ids 2..V-1, some
// sequences shorter than the widest filter).
TextSplit random_split(int n, int max_len, int vocab, std::uint64_t seed) {
  torch::manual_seed(static_cast<std::int64_t>(seed));
  TextSplit s;
  s.offsets.push_back(0);
  const auto lengths = torch::randint(1, max_len + 1, {n}, torch::kLong);
  for (int i = 0; i < n; ++i) {
    const auto len = lengths[i].item<std::int64_t>();
    const auto ids = torch::randint(2, vocab, {len}, torch::kLong);
    for (std::int64_t k = 0; k < len; ++k) s.tokens.push_back(static_cast<std::int32_t>(ids[k].item<std::int64_t>()));
    s.offsets.push_back(static_cast<std::int64_t>(s.tokens.size()));
    s.labels.push_back(static_cast<std::uint8_t>(i % 45));
  }
  return s;
}

std::shared_ptr<TextCnn> small_model(bool unused = false) {
  torch::manual_seed(5);
  TextCnnOptions o;
  o.vocab_size = 50;
  o.embedding_dim = 8;
  o.num_filters = 6;
  o.with_unused = unused;
  auto m = std::make_shared<TextCnn>(o);
  m->to(torch::kDouble);
  return m;
}

torch::Tensor pad_to(const torch::Tensor& padded, std::int64_t length) {
  return torch::constant_pad_nd(padded, {0, length - padded.size(1)}, 0);
}

double max_abs(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("TextCnn: the packed batch and the batch padded to any length give the same outputs and gradients",
          "[text][model]") {
  const TextSplit split = random_split(12, 9, 50, 3);
  std::vector<std::int64_t> rows(12);
  std::iota(rows.begin(), rows.end(), 0);
  const Packed p = pack_sequences(split, rows.data(), 12);
  const torch::Tensor padded = pad_packed(p);
  REQUIRE(padded.size(1) == std::max<std::int64_t>(5, p.lengths.max().item<std::int64_t>()));

  auto model = small_model();
  model->eval();
  // Outputs and the gradients of a fixed weighting of them, from fresh .grad.
  const auto run_model = [&](TextCnn& m, const std::function<torch::Tensor()>& forward) {
    for (auto& q : m.parameters()) q.mutable_grad() = torch::Tensor();
    const auto out = forward();
    (out * torch::linspace(-1, 1, out.numel(), torch::kDouble).view_as(out)).sum().backward();
    std::vector<torch::Tensor> g;
    for (auto& q : m.parameters()) {
      REQUIRE_FALSE(q.grad().is_sparse());  // the embedding's sparse rows land in a dense .grad
      g.push_back(q.grad().clone());
    }
    return std::make_pair(out, g);
  };
  const auto [packed_out, packed_grads] = run_model(*model, [&] { return model->forward_packed(p.packed, p.lengths); });
  for (const std::int64_t extra : {0, 1, 7, 30}) {
    DYNAMIC_SECTION("padded " << extra << " beyond the longest") {
      const auto [out, g] =
          run_model(*model, [&] { return model->forward(pad_to(padded, padded.size(1) + extra), p.lengths); });
      CHECK(max_abs(out, packed_out) < 1e-12);
      REQUIRE(g.size() == packed_grads.size());
      for (std::size_t i = 0; i < g.size(); ++i) CHECK(max_abs(g[i], packed_grads[i]) < 1e-12);
    }
  }
  SECTION("the stock dense embedding backward") {
    torch::manual_seed(5);
    TextCnnOptions o = model->options;
    o.sparse_gradient = false;
    auto dense = std::make_shared<TextCnn>(o);
    dense->to(torch::kDouble);
    dense->eval();
    const auto [out, g] = run_model(*dense, [&] { return dense->forward_packed(p.packed, p.lengths); });
    CHECK(max_abs(out, packed_out) < 1e-12);
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(max_abs(g[i], packed_grads[i]) < 1e-12);
  }
  // A row's output is its own: the same sequence in another batch.
  const std::int64_t one = 4;
  const Packed alone = pack_sequences(split, &one, 1);
  CHECK(max_abs(model->forward_packed(alone.packed, alone.lengths)[0], packed_out[4]) < 1e-12);
  // <pad> is id 0 with a zero embedding that training never changes.
  CHECK(model->embedding->weight[0].abs().max().item<double>() == 0);
}

TEST_CASE("TextCnn: a batch padded short of the widest filter is refused", "[text][model]") {
  auto model = small_model();
  const auto tokens = torch::ones({2, 4}, torch::kLong);
  CHECK_THROWS_WITH(model->forward(tokens, torch::full({2}, 4, torch::kLong)),
                    Catch::Contains("padded to 4 tokens, it needs at least 5"));
}

TEST_CASE("TextCnn with an unused parameter: DDP with find_unused_parameters trains it, without names it",
          "[text][model][ddp]") {
  auto pg = ddp::worker::init_process_group(ddp::worker::DistEnv::single_process(), {});
  const TextSplit split = random_split(8, 7, 50, 4);
  std::vector<std::int64_t> rows(8);
  std::iota(rows.begin(), rows.end(), 0);
  const Packed p = pack_sequences(split, rows.data(), 8);
  const auto labels = torch::arange(8, torch::kLong);
  {
    auto model = small_model(/*unused=*/true);
    ddp::worker::DDPOptions o;
    o.find_unused_parameters = true;
    ddp::worker::DistributedDataParallel ddp(model, pg, o);
    for (int step = 0; step < 2; ++step) {
      ddp.prepare_forward();
      torch::nn::functional::cross_entropy(model->forward_packed(p.packed, p.lengths), labels).backward();
      CHECK(model->fc->weight.grad().abs().sum().item<double>() > 0);
      // As Python's DDP: a parameter no rank used keeps no gradient.
      CHECK_FALSE(model->unused->weight.grad().defined());
    }
  }
  auto model = small_model(/*unused=*/true);
  ddp::worker::DistributedDataParallel ddp(model, pg);
  ddp.prepare_forward();
  CHECK_THROWS_WITH(
      torch::nn::functional::cross_entropy(model->forward_packed(p.packed, p.lengths), labels).backward(),
      Catch::Contains("unused.weight"));
}

namespace {

// The optimizer tests' parameters: a large contiguous tensor (the fused
// loop, in parallel chunks), a small one, and a non-contiguous one (Adam's
// own operations). params_like(init) makes a fresh copy of them.
std::vector<torch::Tensor> adam_test_values() {
  return {torch::randn({300, 257}), torch::randn({7}), torch::randn({6, 4}).t()};
}

std::vector<torch::Tensor> params_like(const std::vector<torch::Tensor>& init) {
  std::vector<torch::Tensor> ps;
  for (const auto& t : init) ps.push_back(t.clone().set_requires_grad(true));
  ps[2] = init[2].detach().clone().t().contiguous().t().set_requires_grad(true);
  return ps;
}

}  // namespace

TEST_CASE("FusedAdam takes Adam's steps, learning-rate changes and saved state", "[text][optimizer]") {
  torch::manual_seed(9);
  const std::vector<torch::Tensor> init = adam_test_values();
  auto a = params_like(init), b = params_like(init);
  REQUIRE_FALSE(b[2].is_contiguous());
  torch::optim::Adam adam(a, torch::optim::AdamOptions(1e-2));
  ddp::worker::FusedAdam fused(b, torch::optim::AdamOptions(1e-2));
  for (int step = 0; step < 6; ++step) {
    if (step == 3)
      for (auto* opt : {static_cast<torch::optim::Optimizer*>(&adam), static_cast<torch::optim::Optimizer*>(&fused)})
        for (auto& g : opt->param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(3e-3);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto g = torch::randn(a[i].sizes()) * (step + 1);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = i == 2 ? g.clone().t().contiguous().t() : g.clone();
    }
    adam.step();
    fused.step();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i << ": largest difference " << (a[i] - b[i]).abs().max().item<double>());
    // Float rounding only: the update is computed in another order, which
    // moves a parameter near 4 by an ulp (4.8e-7) now and then.
    CHECK(torch::allclose(a[i], b[i], 1e-6, 2e-6));
  }
  // The state is Adam's: it saves and loads into a plain Adam.
  std::ostringstream saved;
  {
    torch::serialize::OutputArchive ar;
    fused.save(ar);
    ar.save_to(saved);
  }
  auto c = params_like(init);
  torch::optim::Adam reloaded(c, torch::optim::AdamOptions(3e-3));
  std::istringstream in(saved.str());
  torch::serialize::InputArchive ar;
  ar.load_from(in);
  reloaded.load(ar);
  for (std::size_t i = 0; i < c.size(); ++i) {
    c[i].detach().copy_(b[i].detach());
    const auto g = torch::randn(c[i].sizes());
    c[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = i == 2 ? g.clone().t().contiguous().t() : g.clone();
  }
  reloaded.step();
  fused.step();
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(torch::allclose(c[i], b[i], 1e-6, 2e-6));
}

TEST_CASE("FusedAdam::step_and_zero_grad takes step()'s steps and zeroes each gradient in place",
          "[text][optimizer]") {
  torch::manual_seed(10);
  // Weight decay sends the whole step to Adam::step.
  const double decay = GENERATE(0.0, 0.1);
  INFO("weight decay " << decay);
  const std::vector<torch::Tensor> init = adam_test_values();
  auto a = params_like(init), b = params_like(init);
  ddp::worker::FusedAdam plain(a, torch::optim::AdamOptions(1e-2).weight_decay(decay));
  ddp::worker::FusedAdam zeroing(b, torch::optim::AdamOptions(1e-2).weight_decay(decay));
  // Its elements split as the loop's batch halves split them (set_parallel_for):
  // here in three uneven ranges, each counted.
  std::int64_t covered = 0;
  zeroing.set_parallel_for([&](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
    body(0, n / 3);
    body(n / 3, n / 2);
    body(n / 2, n);
    covered += n;
  });
  for (std::size_t i = 0; i < b.size(); ++i) b[i].mutable_grad() = torch::zeros_like(b[i]);
  std::vector<const void*> storage;
  for (const auto& p : b) storage.push_back(p.grad().data_ptr());
  for (int step = 0; step < 4; ++step) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      const auto g = torch::randn(a[i].sizes());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad().add_(g);  // accumulated into the zeroed gradient, as backward does
    }
    plain.step();
    covered = 0;
    zeroing.step_and_zero_grad();
    CHECK(covered == (decay == 0 ? init[0].numel() + init[1].numel() : 0));  // the fused tensors (not the strided one)
    for (std::size_t i = 0; i < b.size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      CHECK(torch::equal(a[i], b[i]));
      CHECK(torch::count_nonzero(b[i].grad()).item<std::int64_t>() == 0);
      CHECK(b[i].grad().data_ptr() == storage[i]);  // in place: a bucket view stays one
    }
  }
}
