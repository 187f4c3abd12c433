// DDP's reducer protocol, ranks as threads over an in-memory store
// (run_ranks_in_process): unused parameters under no_sync and on one rank
// only, a .grad no rank used, models and frozen parameters that differ
// across ranks, arming by a forward through DDP, bucket sizes. Each case
// once ran as helper processes (test_ddp.cpp). What needs processes stays
// there (shared-memory sums, a rank that dies), and so do the cases
// ThreadSanitizer runs ([tsan]): its build has no in-process target yet.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ddp/worker/ddp.h"
#include "ddp/worker/in_process.h"
#include "ddp/worker/process_group.h"

using ddp::worker::DDP;
using ddp::worker::DDPOptions;
using ddp::worker::DistributedDataParallel;
using ddp::worker::InitOptions;
using ddp::worker::ProcessGroup;
using ddp::worker::ReduceOp;

namespace {

// A failure case must end well before the collective timeout: a rank left
// waiting for a peer that went on would fail only after it.
constexpr double kFailFastS = 40;

// What one rank said (the helper's stdout once) and whether its body
// returned (exit code 0) or threw (its message ends the output).
struct RankOutcome {
  bool ok = false;
  std::string output;
};

struct Outcomes {
  std::vector<RankOutcome> ranks;
  double seconds = 0;  // the whole run, every rank joined
};

// Runs body(group, out) on `world` ranks as threads. Each rank writes only
// its own slot, and no Catch macro runs off the test's thread (Catch2 v2's
// are not thread-safe): the case checks the outcomes afterwards.
using Group = std::shared_ptr<ProcessGroup>;
using RankBody = std::function<void(const Group&, std::ostream&)>;
Outcomes run_each_rank(int world, const RankBody& body) {
  Outcomes out;
  out.ranks.resize(static_cast<std::size_t>(world));
  InitOptions o;
  o.timeout = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  ddp::worker::run_ranks_in_process(
      world,
      [&](const std::shared_ptr<ProcessGroup>& pg) {
        std::ostringstream said;
        auto& slot = out.ranks[static_cast<std::size_t>(pg->rank())];
        try {
          body(pg, said);
          slot.ok = true;
        } catch (const std::exception& e) {
          said << "error: " << e.what() << "\n";
        }
        slot.output = said.str();
      },
      o);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// x with rank-dependent values, so an average differs from every local value.
torch::Tensor rank_input(const ProcessGroup& pg, int64_t rows, int64_t cols) {
  return torch::ones({rows, cols}) * static_cast<double>(pg.rank() + 1);
}

struct WithUnused : torch::nn::Module {
  WithUnused() {
    used = register_module("used", torch::nn::Linear(4, 4));
    unused = register_module("unused", torch::nn::Linear(4, 4));
  }
  torch::nn::Linear used{nullptr}, unused{nullptr};
};

// dtype f16: DDP's per-step status cannot ride in a float16 bucket (not
// exact), so it takes an allreduce of its own (the path NCCL takes too);
// float32 carries it in the last bucket.
const std::map<std::string, torch::ScalarType> kDtypes{{"f32", torch::kFloat}, {"f16", torch::kHalf}};

// l(x), written out for float16 (LibTorch 1.13 has no float16 matmul on the CPU).
torch::Tensor linear(torch::nn::Linear& l, const torch::Tensor& x) {
  if (x.scalar_type() != torch::kHalf) return l(x);
  return (x.unsqueeze(1) * l->weight).sum(-1) + l->bias;
}

struct TwoHeads : torch::nn::Module {
  TwoHeads() {
    a = register_module("a", torch::nn::Linear(4, 3));
    b = register_module("b", torch::nn::Linear(4, 3));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

// The worker helper's parity model, for its gradient sizes, last first:
// 4 B, 256 B, 256 B, 16 KiB, 256 B, 2 KiB.
struct SixGrads : torch::nn::Module {
  SixGrads() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc3(torch::tanh(fc2(torch::tanh(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Copies the module's gradients, averaged over the ranks (what DDP must give).
std::map<std::string, torch::Tensor> averaged_grads(ProcessGroup& pg, torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : m.named_parameters()) {
    auto g = item.value().grad().defined() ? item.value().grad().clone() : torch::zeros_like(item.value());
    pg.allreduce(g, ReduceOp::Mean);
    out[item.key()] = g;
  }
  return out;
}

// Runs `step`, and says what it threw ("caught: ...") or "no error".
void try_step(std::ostream& out, const std::function<void()>& step) {
  try {
    step();
    out << "no error\n";
  } catch (const std::exception& e) {
    out << "caught: " << e.what() << "\n";
  }
}

}  // namespace

TEST_CASE("ddp: models that differ across ranks are an error on every rank, not a hang", "[worker][in-process][ddp]") {
  const auto got = run_each_rank(2, [](const Group& pg, std::ostream&) {
    auto net = std::make_shared<torch::nn::LinearImpl>(4, pg->rank() == 0 ? 4 : 5);
    DistributedDataParallel ddp(net, pg);
  });
  for (const auto& r : got.ranks) {
    INFO(r.output);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.output, Catch::Contains("differ across ranks"));
  }
  CHECK(got.seconds < kFailFastS);
}

TEST_CASE("ddp: find_unused_parameters counts use under no_sync: gradients are averaged, ranks do not drift",
          "[worker][in-process][ddp]") {
  // Micro-batch 1 (under no_sync) uses a and b, micro-batch 2 uses a, and b
  // only on rank 1 with last_b "rank1". The gradients must be the average of
  // each rank's sum over both micro-batches. Inputs made here: seeding
  // LibTorch's one generator on two threads would race.
  std::vector<torch::Tensor> x1, x2;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(10 + r);
    x1.push_back(torch::randn({2, 4}));
    x2.push_back(torch::randn({2, 4}));
  }
  for (const std::string last_b : {"none", "rank1"}) {
    const auto got = run_each_rank(2, [&](const Group& pg, std::ostream& out) {
      auto net = std::make_shared<TwoHeads>();
      DDPOptions o;
      o.find_unused_parameters = true;
      DistributedDataParallel ddp(net, pg, o);
      auto ref = std::make_shared<TwoHeads>();  // the same weights (rank 0's), trained without DDP
      {
        torch::NoGradGuard ng;
        auto src = net->parameters(), dst = ref->parameters();
        for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
      }
      const bool b_last = last_b == "rank1" && pg->rank() == 1;
      const auto& a1 = x1[static_cast<std::size_t>(pg->rank())];
      const auto& a2 = x2[static_cast<std::size_t>(pg->rank())];
      auto loss1 = [&](TwoHeads& m) { return m.a(a1).sum() + m.b(a1).pow(2).sum(); };
      auto loss2 = [&](TwoHeads& m) {
        auto l = m.a(a2).sum();
        return b_last ? l + m.b(a2).pow(2).sum() : l;
      };
      {
        DistributedDataParallel::NoSyncGuard guard(ddp);
        ddp.prepare_forward();
        loss1(*net).backward();
      }
      ddp.prepare_forward();
      loss2(*net).backward();
      loss1(*ref).backward();
      loss2(*ref).backward();
      auto want = averaged_grads(*pg, *ref);
      for (const auto& item : net->named_parameters()) {
        check(item.value().grad().defined(), item.key() + " has a gradient");
        check(torch::allclose(item.value().grad(), want[item.key()]),
              item.key() + ": gradient is the average over ranks");
      }
      out << "nosync unused ok\n";
    });
    for (const auto& r : got.ranks) {
      INFO("b used in the synced micro-batch by: " << last_b << ": " << r.output);
      CHECK(r.ok);
      CHECK_THAT(r.output, Catch::Contains("nosync unused ok"));
    }
  }
}

TEST_CASE("ddp: find_unused_parameters leaves the .grad of a parameter no rank used exactly as it was",
          "[worker][in-process][ddp]") {
  // A rank-dependent .grad: one set by hand (not the bucket view), and one
  // written into the bucket view in place.
  const auto got = run_each_rank(2, [](const Group& pg, std::ostream& out) {
    auto net = std::make_shared<TwoHeads>();
    DDPOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(net, pg, o);
    auto x = torch::ones({2, 4});
    const double mine = 1.0 + pg->rank();
    auto& bw = net->b->weight;
    // 1. A hand-set .grad: never used, never reduced.
    bw.mutable_grad() = torch::full({3, 4}, mine);
    ddp.prepare_forward();
    net->a(x).sum().backward();
    check(torch::equal(bw.grad(), torch::full({3, 4}, mine)), "hand-set .grad of an unused parameter is kept");
    // 2. b used once (its .grad becomes the bucket view), then rank-dependent
    // values written into it in place, then a step that uses only a.
    ddp.prepare_forward();
    (net->a(x).sum() + net->b(x).sum()).backward();
    const void* view = bw.grad().data_ptr();
    bw.grad().fill_(mine);
    ddp.prepare_forward();
    net->a(x).sum().backward();
    check(bw.grad().data_ptr() == view, "the .grad of an unused parameter is still its bucket view");
    check(torch::equal(bw.grad(), torch::full({3, 4}, mine)), "values in an unused parameter's bucket view are kept");
    out << "unused keeps grad ok\n";
  });
  for (const auto& r : got.ranks) {
    INFO(r.output);
    CHECK(r.ok);
    CHECK_THAT(r.output, Catch::Contains("unused keeps grad ok"));
  }
}

TEST_CASE("ddp: ranks that freeze different parameters are an error on every rank", "[worker][in-process][ddp]") {
  const auto got = run_each_rank(2, [](const Group& pg, std::ostream& out) {
    auto net = std::make_shared<SixGrads>();
    if (pg->rank() == 1)
      for (auto& p : net->fc1->parameters()) p.set_requires_grad(false);
    DDP<SixGrads> ddp(net, pg);
    torch::mse_loss(ddp.forward(torch::ones({4, 8})), torch::ones({4, 1})).backward();
    out << "no error\n";
  });
  for (const auto& r : got.ranks) {
    INFO(r.output);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.output, Catch::Contains("require grad differ across ranks") && Catch::Contains("requires_grad=false"));
  }
  CHECK_THAT(got.ranks[1].output, Catch::Contains("fc1.weight"));  // rank 1 names what it froze
  CHECK(got.seconds < kFailFastS);
}

TEST_CASE("ddp: a parameter unused on one rank fails every rank at once, naming it, and the ranks stay in step",
          "[worker][in-process][ddp]") {
  // Step 1: rank 0 leaves `unused` out of its loss; every rank gets an error
  // (rank 0 naming the parameter), and catching it leaves the ranks in step:
  // step 2 uses every parameter and is reduced correctly.
  for (const auto& [dtype_name, dtype] : kDtypes) {
    const auto got = run_each_rank(2, [dtype = dtype](const Group& pg, std::ostream& out) {
      auto net = std::make_shared<WithUnused>();
      net->to(dtype);
      DistributedDataParallel ddp(net, pg);
      auto x = rank_input(*pg, 2, 4).to(dtype);
      try_step(out, [&] {
        ddp.prepare_forward();
        auto loss = linear(net->used, x).sum();
        if (pg->rank() != 0) loss = loss + linear(net->unused, x).sum();
        loss.backward();
      });
      net->zero_grad();
      ddp.prepare_forward();
      (linear(net->used, x).sum() + linear(net->unused, x).sum()).backward();
      std::ostringstream grad;
      grad << net->used->weight.grad();
      check(torch::allclose(net->used->weight.grad().to(torch::kFloat), torch::full({4, 4}, 3.0)),
            "step 2 gradient is averaged: " + grad.str());
      out << "recovered\n";
    });
    for (const auto& r : got.ranks) {
      INFO(dtype_name << ": " << r.output);
      REQUIRE(r.ok);
      CHECK_THAT(r.output, Catch::Contains("caught: ") && Catch::Contains("'unused.weight'") &&
                               Catch::Contains("find_unused_parameters"));
      CHECK_THAT(r.output, Catch::Contains("recovered"));
    }
    CHECK_THAT(got.ranks[0].output, Catch::Contains("received no gradient in this backward pass on this rank"));
    CHECK_THAT(got.ranks[1].output, Catch::Contains("received no gradient in this backward pass on rank 0"));
    CHECK(got.seconds < kFailFastS);
  }
}

TEST_CASE("ddp: only a backward after a forward through DDP is reduced", "[worker][in-process][ddp]") {
  const auto got = run_each_rank(2, [](const Group& pg, std::ostream& out) {
    auto net = std::make_shared<torch::nn::LinearImpl>(4, 1);
    DistributedDataParallel ddp(net, pg);
    auto x = rank_input(*pg, 2, 4);
    const auto local = torch::full({1, 4}, 2.0 * (pg->rank() + 1));  // the batch's sum of x
    const auto mean = torch::full({1, 4}, 3.0);                       // over 2 ranks
    net->forward(x).sum().backward();
    check(torch::allclose(net->weight.grad(), local), "a backward without a DDP forward stays local");
    net->zero_grad();
    ddp.prepare_forward();
    net->forward(x).sum().backward();
    check(torch::allclose(net->weight.grad(), mean), "a backward after a DDP forward is averaged");
    net->zero_grad();
    net->forward(x).sum().backward();
    check(torch::allclose(net->weight.grad(), local), "one DDP forward arms one backward");
    {
      torch::NoGradGuard ng;
      ddp.prepare_forward();
      net->forward(x);
    }
    net->zero_grad();
    net->forward(x).sum().backward();
    check(torch::allclose(net->weight.grad(), local), "a forward without grad arms nothing");
    out << "unarmed ok\n";
  });
  for (const auto& r : got.ranks) {
    INFO(r.output);
    CHECK(r.ok);
    CHECK_THAT(r.output, Catch::Contains("unarmed ok"));
  }
}

TEST_CASE("ddp: bucket sizes take fractions of a MiB, and a size that is not one is a one-line error",
          "[worker][in-process][ddp]") {
  // The bucket count DDP makes for SixGrads on one rank, or the error.
  auto buckets = [](std::optional<double> cap, std::optional<double> first) {
    const auto got = run_each_rank(1, [&](const Group& pg, std::ostream& out) {
      DDPOptions o;
      o.bucket_cap_mb = cap;
      o.first_bucket_mb = first;
      DistributedDataParallel ddp(std::make_shared<SixGrads>(), pg, o);
      out << "buckets " << ddp.buckets().size();
    });
    return got.ranks[0].output;
  };
  // A 0.0001 MiB (104 B) limit closes a bucket after each gradient but the first.
  CHECK(buckets(0.0001, 0.0001) == "buckets 5");
  CHECK(buckets(25, 25) == "buckets 1");
  // On the CPU an unset first bucket takes bucket_cap_mb (not Python's 1 MiB,
  // which would hold all 19 KiB of gradients in one bucket here).
  CHECK(buckets(0.0001, std::nullopt) == "buckets 5");
  CHECK(buckets(0.0001, 1) == "buckets 1");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& [cap, first] : std::vector<std::pair<std::optional<double>, std::optional<double>>>{
           {0, std::nullopt}, {-1, std::nullopt}, {nan, std::nullopt}, {std::nullopt, 0}}) {
    const auto said = buckets(cap, first);
    INFO("cap " << cap.value_or(-99) << ", first " << first.value_or(-99) << ": " << said);
    CHECK_THAT(said, Catch::StartsWith("error: ") &&
                         Catch::Contains("is not a bucket size; give MiB in (0, 1048576]"));
    CHECK(said.find('\n') == said.size() - 1);  // one line
  }
}
