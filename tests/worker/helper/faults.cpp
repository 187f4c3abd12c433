// The helper's failure modes: an exception out of main, a backward that
// throws before or after the step was reduced, a hook that refuses a
// gradient, a rank training until a test kills it, a crash in exit.
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "ddp/worker/ddp.h"
#include "ddp/worker/process_group.h"
#include "helper.h"

using namespace ddp::worker;

namespace worker_helper {

namespace {

struct EmbedNet : torch::nn::Module {
  explicit EmbedNet(bool sparse) {
    emb = register_module("emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 4).sparse(sparse)));
    fc = register_module("fc", torch::nn::Linear(4, 1));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr};
};

// Identity whose backward throws when asked to: a failure in a node that
// runs after some DDP hooks fired.
struct ThrowInBackward : torch::autograd::Function<ThrowInBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, bool fail) {
    ctx->saved_data["fail"] = fail;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list g) {
    if (ctx->saved_data["fail"].toBool()) throw std::runtime_error("deliberate failure in backward");
    return {g[0], torch::Tensor()};
  }
};

struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    l1 = register_module("l1", torch::nn::Linear(4, 4));
    l2 = register_module("l2", torch::nn::Linear(4, 1));
  }
  torch::Tensor forward(torch::Tensor x, bool fail) { return l2(ThrowInBackward::apply(l1(x), fail)); }
  torch::nn::Linear l1{nullptr}, l2{nullptr};
};

struct DeliberateFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

// Trains until killed, printing "step N"; the peer-death test kills one rank.
int train_forever(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  torch::manual_seed(0);
  auto net = std::make_shared<ParityNet>();
  DDP<ParityNet> ddp(net, pg);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.01));
  auto x = torch::randn({8, 8}), y = torch::randn({8, 1});
  for (int64_t step = 0;; ++step) {
    opt.zero_grad();
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
    std::cout << "step " << step << std::endl;
  }
}

// Rank 0's embedding has sparse gradients, which the DDP hook refuses (it
// throws inside the backward). Both ranks catch the error, then check with
// one allreduce that they are still in step.
int hook_throw(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<EmbedNet>(pg->rank() == 0);
  DistributedDataParallel ddp(net, pg);
  try {
    ddp.prepare_forward();
    net->fc(net->emb(torch::tensor({1, 2, 3}, torch::kLong))).sum().backward();
    std::cout << "no error" << std::endl;
  } catch (const std::exception& e) {
    std::cout << "caught: " << e.what() << std::endl;
  }
  auto t = torch::full({7}, 1.0);
  pg->allreduce(t);
  check(torch::allclose(t, torch::full({7}, static_cast<double>(pg->world_size()))), "allreduce after the error");
  std::cout << "in step" << std::endl;
  return 0;
}

// Step 1: rank 0's backward throws after every parameter's gradient arrived
// (a hook on the input, whose AccumulateGrad autograd runs after the
// parameters'): the step was reduced already (the last bucket went out with
// the status), so rank 1 finishes it without an error, rank 0 sees only its
// own, the next prepare_forward on rank 0 waits for the reduction, and both
// hold the same averaged gradients and go on in step.
int throws_after_reduction(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<TwoLayers>();
  DistributedDataParallel ddp(net, pg);
  auto x = rank_input(*pg, 2, 4).requires_grad_();
  if (pg->rank() == 0)
    x.register_hook([](const torch::Tensor&) -> torch::Tensor {
      throw std::runtime_error("deliberate failure after the gradients");
    });
  try {
    ddp.prepare_forward();
    net->forward(x * 1.0, false).sum().backward();
    std::cout << "no error" << std::endl;
  } catch (const std::exception& e) {
    std::cout << "caught: " << e.what() << std::endl;
  }
  ddp.prepare_forward();  // rank 0: finishes the step it left
  for (const auto& p : net->parameters()) {
    auto g = p.grad().clone(), max = g.clone();
    pg->allreduce(max, ReduceOp::Max);
    check(torch::equal(g, max), "step 1 gradients are the same averages on every rank");
  }
  net->zero_grad();
  ddp.prepare_forward();
  net->forward(rank_input(*pg, 2, 4), false).sum().backward();
  auto want = net->l2->weight.grad().clone();
  pg->allreduce(want, ReduceOp::Max);
  check(torch::allclose(net->l2->weight.grad(), want), "step 2 gradients agree across ranks");
  std::cout << "recovered" << std::endl;
  return 0;
}

// Step 1: rank 0's backward throws after l2's hooks fired; both ranks must
// get an error, and step 2 must be reduced correctly.
int backward_throws(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<TwoLayers>();
  DistributedDataParallel ddp(net, pg);
  auto x = rank_input(*pg, 2, 4);
  try {
    ddp.prepare_forward();
    net->forward(x, pg->rank() == 0).sum().backward();
    std::cout << "no error" << std::endl;
  } catch (const std::exception& e) {
    std::cout << "caught: " << e.what() << std::endl;
  }
  net->zero_grad();
  ddp.prepare_forward();
  net->forward(x, false).sum().backward();
  // d/d l2.weight of sum(l2(h)) = sum over the batch of h; the mean over ranks
  // must be what every rank holds.
  auto want = net->l2->weight.grad().clone();
  pg->allreduce(want, ReduceOp::Max);
  check(torch::allclose(net->l2->weight.grad(), want), "step 2 gradients agree across ranks");
  std::cout << "recovered" << std::endl;
  return 0;
}

int throw_mode(int argc, char** argv) {
  throw DeliberateFailure("deliberate failure from rank " + std::string(std::getenv("RANK") ? std::getenv("RANK") : "?"));
}

// abort-at-exit: one allreduce, the group destroyed, and rank 1 aborts in
// its exit (an atexit function), after run_main's body returned: a library
// whose teardown crashes.
int abort_at_exit(int argc, char** argv) {
  int rank = 0;
  {
    auto pg = init_process_group({}, argc, argv);
    auto t = torch::ones({4});
    pg->allreduce(t);
    rank = pg->rank();
  }
  if (rank == 1) std::atexit([] { std::abort(); });
  return 0;
}

}  // namespace worker_helper
