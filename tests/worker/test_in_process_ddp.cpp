// The in-process level of the runtime's multi-rank tests: several ranks as
// threads over one in-memory store (run_ranks_in_process, in_process.h), so
// collectives, DDP's reducer and its options are checked in milliseconds,
// without the worker helper; the reducer's protocol has its own file
// (test_in_process_reducer.cpp). The process level (test_ddp.cpp,
// test_process_group.cpp) keeps what needs real processes: TCPStore
// rendezvous, shared-memory sums, a rank that dies.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <mutex>
#include <string>
#include <vector>

#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/in_process.h"
#include "ddp/worker/process_group.h"

using ddp::worker::DDPOptions;
using ddp::worker::DistributedDataParallel;
using ddp::worker::ProcessGroup;
using ddp::worker::ReduceOp;
using ddp::worker::run_ranks_in_process;

namespace {

struct NetImpl : torch::nn::Module {
  explicit NetImpl(bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(4, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
};
TORCH_MODULE(Net);

// The same starting weights for every rank and the single process, made once
// on the calling thread (LibTorch's generator is global: seeding it on
// several threads at once would race).
struct Setup {
  std::vector<torch::Tensor> init;
  torch::Tensor x, y;
  Setup() {
    torch::manual_seed(7);
    Net reference(true);
    for (const auto& p : reference->parameters()) init.push_back(p.detach().clone());
    x = torch::randn({32, 8});
    y = torch::randint(0, 4, {32}, torch::kLong);
  }
  // The unused layer's parameters come last, so both shapes take `init`'s
  // first ones.
  Net make(bool with_unused = false) const {
    Net net(with_unused);
    torch::NoGradGuard no_grad;
    auto params = net->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(init[i]);
    return net;
  }
};

double max_rel_error(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to(torch::kDouble), y = b[i].to(torch::kDouble);
    worst = std::max(worst, ((x - y).norm() / y.norm().clamp_min(1e-12)).item<double>());
  }
  return worst;
}

std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone());
  return out;
}

// `steps` SGD steps of the single process on batches of `batch` rows, each
// step's gradient accumulated over `micro` micro-batches.
std::vector<torch::Tensor> single_process(const Setup& s, int steps, int batch, int micro) {
  Net net = s.make();
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    for (int m = 0; m < micro; ++m) {
      const auto rows = torch::arange(step * batch * micro + m * batch, step * batch * micro + (m + 1) * batch) % 32;
      torch::nn::functional::cross_entropy(net->forward(s.x.index({rows})), s.y.index({rows})).backward();
    }
    opt.step();
  }
  return snapshot(net->parameters());
}

// The same on `world` ranks, each taking its contiguous share of every
// (micro-)batch, the first micro-1 under no_sync.
std::vector<std::vector<torch::Tensor>> ddp_ranks(const Setup& s, int world, int steps, int batch, int micro,
                                                  DDPOptions options = {}) {
  std::vector<std::vector<torch::Tensor>> out(static_cast<std::size_t>(world));
  run_ranks_in_process(world, [&](const std::shared_ptr<ProcessGroup>& pg) {
    Net net = s.make();
    DistributedDataParallel ddp(net.ptr(), pg, options);
    torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.1));
    const int share = batch / world;
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      for (int m = 0; m < micro; ++m) {
        const int begin = step * batch * micro + m * batch + pg->rank() * share;
        const auto rows = torch::arange(begin, begin + share) % 32;
        auto run = [&] {
          ddp.prepare_forward();
          torch::nn::functional::cross_entropy(net->forward(s.x.index({rows})), s.y.index({rows})).backward();
        };
        if (m + 1 < micro) {
          DistributedDataParallel::NoSyncGuard guard(ddp);
          run();
        } else {
          run();
        }
      }
      opt.step();
    }
    out[static_cast<std::size_t>(pg->rank())] = snapshot(net->parameters());
  });
  return out;
}

}  // namespace

TEST_CASE("in-process: collectives agree on 2 and 3 ranks", "[worker][in-process]") {
  for (int world : {2, 3}) {
    std::mutex m;
    std::vector<std::string> seen;
    run_ranks_in_process(world, [&](const std::shared_ptr<ProcessGroup>& pg) {
      const double r = pg->rank();
      auto sum = torch::full({3}, r + 1, torch::kDouble);
      pg->allreduce(sum);
      auto max = torch::full({1}, r * 10, torch::kDouble);
      pg->allreduce(max, ReduceOp::Max);
      auto mean = torch::full({1}, r, torch::kDouble);
      pg->allreduce(mean, ReduceOp::Mean);
      auto root = torch::full({2}, r, torch::kDouble);
      pg->broadcast(root, world - 1);
      const auto all = pg->all_gather(torch::full({1}, r * r, torch::kDouble));
      std::string line = std::to_string(sum[0].item<double>()) + " " + std::to_string(max.item<double>()) + " " +
                         std::to_string(mean.item<double>()) + " " + std::to_string(root[1].item<double>());
      for (const auto& t : all) line += " " + std::to_string(t.item<double>());
      std::lock_guard<std::mutex> lock(m);
      seen.push_back(line);
    });
    const double w = world;
    std::string want = std::to_string(w * (w + 1) / 2) + " " + std::to_string((w - 1) * 10) + " " +
                       std::to_string((w - 1) / 2) + " " + std::to_string(w - 1);
    for (int r = 0; r < world; ++r) want += " " + std::to_string(static_cast<double>(r * r));
    INFO("world " << world);
    REQUIRE(seen.size() == static_cast<std::size_t>(world));
    for (const auto& line : seen) CHECK(line == want);
  }
}

TEST_CASE("in-process: DDP on 2 ranks with batch B ends with the weights of 1 process with batch 2B",
          "[worker][in-process][ddp]") {
  const Setup s;
  const auto ref = single_process(s, 5, 16, 1);
  // Small buckets too: every parameter its own allreduce, in the order the
  // gradients become ready.
  for (double cap : {25.0, 0.0001}) {
    DDPOptions o;
    o.bucket_cap_mb = cap;
    const auto ranks = ddp_ranks(s, 2, 5, 16, 1, o);
    for (const auto& got : ranks) {
      INFO("bucket_cap_mb " << cap);
      CHECK(max_rel_error(got, ref) < 1e-5);
    }
  }
  // Not trivially equal: the steps moved the weights.
  CHECK(max_rel_error(ref, s.make()->parameters()) > 1e-3);
}

TEST_CASE("in-process: no_sync accumulation over 2 micro-batches matches 1 process accumulating both",
          "[worker][in-process][ddp]") {
  const Setup s;
  const auto ref = single_process(s, 3, 8, 2);
  for (const auto& got : ddp_ranks(s, 2, 3, 8, 2)) CHECK(max_rel_error(got, ref) < 1e-5);
  // The control: accumulating is not the same as stepping per micro-batch.
  CHECK(max_rel_error(single_process(s, 6, 8, 1), ref) > 1e-4);
}

TEST_CASE("in-process: a parameter no rank uses is named by DDP, and reduced with find_unused_parameters",
          "[worker][in-process][ddp]") {
  const Setup s;
  std::mutex m;
  std::vector<std::string> errors;
  auto train = [&](bool find_unused) {
    run_ranks_in_process(2, [&](const std::shared_ptr<ProcessGroup>& pg) {
      Net net = s.make(/*with_unused=*/true);
      DDPOptions o;
      o.find_unused_parameters = find_unused;
      DistributedDataParallel ddp(net.ptr(), pg, o);
      for (int step = 0; step < 2; ++step) {
        ddp.prepare_forward();
        try {
          torch::nn::functional::cross_entropy(net->forward(s.x), s.y).backward();
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(m);
          errors.push_back(e.what());
          return;
        }
      }
    });
  };
  train(false);
  REQUIRE(errors.size() == 2);  // every rank stops, naming the parameter
  for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("unused.weight"));
  errors.clear();
  train(true);
  CHECK(errors.empty());
}
