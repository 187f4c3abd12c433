// The helper's DDP modes: parity with one process, gradients as bucket
// views, bucket sizes, the overlap of allreduces with backward, unused
// parameters (with no_sync, kept gradients, one rank leaving one out),
// arming, models that differ across ranks.
#include <torch/torch.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/worker/checkpoint.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/process_group.h"
#include "helper.h"

using namespace ddp::worker;

namespace worker_helper {

namespace {

// What Optimizer::zero_grad does in LibTorch 1.13 (2.x's default is
// set_to_none instead): detach and zero each .grad in place.
void zero_grads_in_place(const std::vector<at::Tensor>& params) {
  for (auto p : params)
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
}

// The file behind the mapping that holds `p` (/proc/self/maps' last
// column; "" for anonymous memory or none).
std::string mapping_of(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (std::string l; std::getline(maps, l);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(l.c_str(), "%" SCNxPTR "-%" SCNxPTR, &lo, &hi) != 2 || a < lo || a >= hi) continue;
    const auto slash = l.find('/');
    return slash == std::string::npos ? "" : l.substr(slash);
  }
  return "";
}

struct Deep : torch::nn::Module {
  explicit Deep(int layers) {
    for (int i = 0; i < layers; ++i)
      fcs.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(512, 512)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& f : fcs) x = torch::relu(f(x));
    return x;
  }
  std::vector<torch::nn::Linear> fcs;
};

struct WithUnused : torch::nn::Module {
  WithUnused() {
    used = register_module("used", torch::nn::Linear(4, 4));
    unused = register_module("unused", torch::nn::Linear(4, 4));
  }
  torch::nn::Linear used{nullptr}, unused{nullptr};
};

// dtype=f16: DDP's per-step status cannot ride in a float16 bucket (not
// exact), so it takes an allreduce of its own (the path NCCL takes too);
// float32 (default) carries it in the last bucket.
torch::ScalarType model_dtype(const std::map<std::string, std::string>& kv) {
  return arg(kv, "dtype", "f32") == "f16" ? torch::kHalf : torch::kFloat;
}

// l(x), written out for float16 (LibTorch 1.13 has no float16 matmul on the CPU).
torch::Tensor linear(torch::nn::Linear& l, const torch::Tensor& x) {
  if (x.scalar_type() != torch::kHalf) return l(x);
  return (x.unsqueeze(1) * l->weight).sum(-1) + l->bias;
}

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

struct TwoHeads : torch::nn::Module {
  TwoHeads() {
    a = register_module("a", torch::nn::Linear(4, 3));
    b = register_module("b", torch::nn::Linear(4, 3));
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

}  // namespace

// variant single: one process, global batch 2B. ddp: 2 ranks, batch B each.
// nosync: 2 ranks, two micro-batches of B/2, the first under no_sync.
// views=0: private buckets (gradient_as_bucket_view off). zero=none: the
// gradients are reset (set_to_none) instead of zeroed in place each step.
int parity(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const std::string variant = arg(kv, "variant", "ddp");
  const bool set_to_none = arg(kv, "zero", "inplace") == "none";
  const int steps = std::stoi(arg(kv, "steps", "5"));
  const int B = std::stoi(arg(kv, "batch", "16"));
  const std::string out = arg(kv, "out", "");
  torch::manual_seed(7);
  auto X = torch::randn({steps * 2 * B, 8});
  auto Y = torch::randn({steps * 2 * B, 1});

  if (variant == "single") {
    torch::manual_seed(1234);
    auto net = std::make_shared<ParityNet>();
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    for (int s = 0; s < steps; ++s) {
      auto x = X.narrow(0, s * 2 * B, 2 * B), y = Y.narrow(0, s * 2 * B, 2 * B);
      opt.zero_grad();
      torch::mse_loss(net->forward(x), y).backward();
      opt.step();
    }
    save_weights_for_python(out, *net);
    return 0;
  }
  auto pg = init_process_group({}, argc, argv);
  check(pg->world_size() == 2, "parity runs with 2 ranks");
  torch::manual_seed(1234 + 100 * pg->rank());  // different start: DDP must broadcast rank 0's
  auto net = std::make_shared<ParityNet>();
  DDPOptions o;
  o.gradient_as_bucket_view = arg(kv, "views", "1") == "1";
  DDP<ParityNet> ddp(net, pg, o);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < steps; ++s) {
    const int64_t start = s * 2 * B + pg->rank() * B;
    auto x = X.narrow(0, start, B), y = Y.narrow(0, start, B);
    if (set_to_none) {
      for (auto& p : ddp.parameters()) p.mutable_grad().reset();
    } else {
      zero_grads_in_place(ddp.parameters());
    }
    if (variant == "ddp") {
      torch::mse_loss(ddp.forward(x), y).backward();
    } else if (variant == "nosync") {
      const int h = B / 2;
      {
        auto guard = ddp.no_sync();
        (torch::mse_loss(ddp.forward(x.narrow(0, 0, h)), y.narrow(0, 0, h)) * 0.5).backward();
      }
      (torch::mse_loss(ddp.forward(x.narrow(0, h, h)), y.narrow(0, h, h)) * 0.5).backward();
    } else {
      throw std::invalid_argument("unknown variant " + variant);
    }
    opt.step();
  }
  // Each rank writes its own file ("{rank}" in out), so the test compares both.
  std::string path = out;
  if (auto at = path.find("{rank}"); at != std::string::npos) path.replace(at, 6, std::to_string(pg->rank()));
  save_weights_for_python(path, *net);
  return 0;
}

// Gradients as bucket views: after a synced backward the gradients of a
// bucket's parameters lie back to back in fill order (they are the bucket),
// stay at the same address across steps (no copies), survive
// Optimizer::zero_grad (whatever this LibTorch's default), zeroing in place
// and set_to_none, and on one machine lie in the shared-memory segment the
// ranks sum them in. views=0: a .grad the caller holds is updated in place.
int views(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  auto pg = init_process_group({}, argc, argv);
  torch::manual_seed(5);
  auto net = std::make_shared<ParityNet>();
  DDPOptions o;
  o.gradient_as_bucket_view = arg(kv, "views", "1") == "1";
  o.bucket_cap_mb = 1;
  DDP<ParityNet> ddp(net, pg, o);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.01));
  auto params = ddp.parameters();
  auto x = torch::ones({4, 8}) * (pg->rank() + 1.0), y = torch::ones({4, 1});
  auto step = [&] {
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
  };
  step();
  std::vector<const void*> where;
  for (auto& p : params) where.push_back(p.grad().data_ptr());
  if (!o.gradient_as_bucket_view) {
    std::vector<at::Tensor> held;
    for (auto& p : params) held.push_back(p.grad());
    zero_grads_in_place(params);
    step();
    for (size_t i = 0; i < params.size(); ++i)
      check(params[i].grad().is_same(held[i]), "views=0: .grad is updated in place, not replaced");
    std::cout << "views ok" << std::endl;
    return 0;
  }
  // On one machine the buckets are shared memory, summed in place.
  if (pg->shared_memory_allreduce())
    for (auto& p : params)
      check(mapping_of(p.grad().data_ptr()).rfind("/dev/shm/ddp-shm-", 0) == 0,
            "a gradient lies in the shared buckets, not in " + mapping_of(p.grad().data_ptr()));
  for (const auto& b : ddp.buckets()) {
    const auto& idx = b.parameter_indices;
    for (size_t i = 1; i < idx.size(); ++i) {
      const auto& prev = params[idx[i - 1]].grad();
      check(static_cast<const char*>(prev.data_ptr()) + prev.numel() * prev.element_size() ==
                params[idx[i]].grad().data_ptr(),
            "the gradients of a bucket are adjacent in fill order");
    }
  }
  for (int round = 0; round < 3; ++round) {
    if (round == 0) {
      opt.zero_grad();  // this LibTorch's default: in place (1.13) or set_to_none (2.x)
    } else if (round == 1) {
      for (auto& p : params) p.mutable_grad().reset();  // set_to_none
    } else {
      zero_grads_in_place(params);
      for (auto& p : params) check(p.grad().abs().max().item<double>() == 0, "zeroing in place zeroed the view");
    }
    step();
    for (size_t i = 0; i < params.size(); ++i)
      check(params[i].grad().data_ptr() == where[i], "the gradient stays in its bucket slice (round " +
                                                          std::to_string(round) + ")");
  }
  std::cout << "views ok" << std::endl;
  return 0;
}

// Writes the event order of one synced backward: "G <param>", "L <bucket>",
// "F" lines, plus "B <bucket> <first param>" for the bucket layout.
int overlap(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  auto pg = init_process_group({}, argc, argv);
  torch::manual_seed(1);
  auto net = std::make_shared<Deep>(6);
  DDPOptions o;
  o.bucket_cap_mb = 1;
  o.record_events = true;
  DDP<Deep> ddp(net, pg, o);
  auto x = torch::randn({32, 512});
  for (int it = 0; it < 2; ++it) {  // the second iteration is the one recorded
    ddp.clear_events();
    ddp.forward(x).pow(2).mean().backward();
  }
  // out=FILE: rank 0's events (the ranks' orders can differ; one file
  // written by both would hold whichever rank wrote last, or a mix).
  const std::string out = arg(kv, "out", "");
  if (!out.empty() && pg->rank() != 0) return 0;
  std::ofstream f(out.empty() ? "/dev/stdout" : out);
  for (size_t b = 0; b < ddp.buckets().size(); ++b) f << "B " << b << " " << ddp.buckets()[b].parameter_indices.size() << "\n";
  for (const auto& e : ddp.events()) {
    switch (e.kind) {
      case DDPEvent::Kind::GradReady: f << "G " << e.index << "\n"; break;
      case DDPEvent::Kind::BucketLaunched: f << "L " << e.index << "\n"; break;
      case DDPEvent::Kind::BackwardFinished: f << "F\n"; break;
      case DDPEvent::Kind::BucketReduced: f << "R " << e.index << "\n"; break;
      case DDPEvent::Kind::BackwardComputed: f << "C\n"; break;
    }
  }
  return 0;
}

int unused(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<WithUnused>();
  const auto dtype = model_dtype(kv);
  net->to(dtype);
  DDPOptions o;
  o.find_unused_parameters = arg(kv, "find_unused", "0") == "1";
  DistributedDataParallel ddp(net, pg, o);
  for (int it = 0; it < 2; ++it) {
    ddp.prepare_forward();
    net->zero_grad();
    linear(net->used, torch::ones({2, 4}, dtype) * (pg->rank() + 1)).sum().backward();
  }
  check(net->used->weight.grad().defined(), "used weight has a gradient");
  check(!net->unused->weight.grad().defined(), "globally unused weight has no gradient");
  // grad of sum(W x + b) w.r.t. W is sum over batch of x: rank r gives 2(r+1); mean over 2 ranks is 3.
  check(torch::allclose(net->used->weight.grad().to(torch::kFloat), torch::full({4, 4}, 3.0)), "averaged gradient");
  std::cout << "unused ok" << std::endl;
  return 0;
}

int mismatch(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<torch::nn::LinearImpl>(4, pg->rank() == 0 ? 4 : 5);
  DistributedDataParallel ddp(net, pg);
  return 0;
}

// find_unused_parameters with no_sync: micro-batch 1 (under no_sync) uses a
// and b, micro-batch 2 uses a, and b only on rank 1 with last_b=rank1. The
// gradients must be the average of each rank's sum over both micro-batches.
int nosync_unused(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  auto pg = init_process_group({}, argc, argv);
  torch::manual_seed(3 + pg->rank());
  auto net = std::make_shared<TwoHeads>();
  DDPOptions o;
  o.find_unused_parameters = true;
  DistributedDataParallel ddp(net, pg, o);
  auto ref = std::make_shared<TwoHeads>();  // the same weights, trained without DDP
  {
    torch::NoGradGuard ng;
    auto src = net->parameters(), dst = ref->parameters();
    for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  const bool b_last = arg(kv, "last_b", "none") == "rank1" && pg->rank() == 1;
  torch::manual_seed(10 + pg->rank());
  auto x1 = torch::randn({2, 4}), x2 = torch::randn({2, 4});
  auto loss1 = [&](TwoHeads& m) { return m.a(x1).sum() + m.b(x1).pow(2).sum(); };
  auto loss2 = [&](TwoHeads& m) {
    auto l = m.a(x2).sum();
    return b_last ? l + m.b(x2).pow(2).sum() : l;
  };
  {
    auto guard = ddp.no_sync();
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
    check(torch::allclose(item.value().grad(), want[item.key()]), item.key() + ": gradient is the average over ranks");
  }
  std::cout << "nosync unused ok" << std::endl;
  return 0;
}

// find_unused_parameters: a parameter no rank used in a synced backward
// keeps its .grad exactly, even a rank-dependent one: a .grad set by hand
// (not the bucket view) and one written into the bucket view in place.
int unused_keeps_grad(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  torch::manual_seed(3);
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
  std::cout << "unused keeps grad ok" << std::endl;
  return 0;
}

// Builds DDP with bucket_cap_mb=cap, first_bucket_mb=first (MiB, fractions
// allowed; each left unset when not given) and prints the bucket count.
int bucket_sizes(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<ParityNet>();
  DDPOptions o;
  if (kv.count("cap")) o.bucket_cap_mb = std::stod(kv.at("cap"));
  if (kv.count("first")) o.first_bucket_mb = std::stod(kv.at("first"));
  DistributedDataParallel ddp(net, pg, o);
  std::cout << "buckets " << ddp.buckets().size() << std::endl;
  return 0;
}

// Rank 1 freezes fc1: the buckets would differ, so construction must fail.
int frozen_mismatch(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<ParityNet>();
  if (pg->rank() == 1)
    for (auto& p : net->fc1->parameters()) p.set_requires_grad(false);
  DDP<ParityNet> ddp(net, pg);
  torch::mse_loss(ddp.forward(torch::randn({4, 8})), torch::randn({4, 1})).backward();
  std::cout << "no error" << std::endl;
  return 0;
}

// Step 1: rank 0 leaves `unused` out of its loss; every rank must get an
// error (rank 0 naming the parameters), and catching it must leave the ranks
// in step: step 2 uses every parameter and is reduced correctly.
int unused_one_rank(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<WithUnused>();
  net->to(model_dtype(kv));
  DistributedDataParallel ddp(net, pg);
  auto x = rank_input(*pg, 2, 4).to(model_dtype(kv));
  try {
    ddp.prepare_forward();
    auto loss = linear(net->used, x).sum();
    if (pg->rank() != 0) loss = loss + linear(net->unused, x).sum();
    loss.backward();
    std::cout << "no error" << std::endl;
  } catch (const std::exception& e) {
    std::cout << "caught: " << e.what() << std::endl;
  }
  net->zero_grad();
  ddp.prepare_forward();
  (linear(net->used, x).sum() + linear(net->unused, x).sum()).backward();
  std::ostringstream got;
  got << net->used->weight.grad();
  check(torch::allclose(net->used->weight.grad().to(torch::kFloat), torch::full({4, 4}, 3.0)),
        "step 2 gradient is averaged: " + got.str());
  std::cout << "recovered" << std::endl;
  return 0;
}

// Only a backward after a forward through DDP is reduced (Python's rule).
int unarmed(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  auto net = std::make_shared<torch::nn::LinearImpl>(4, 1);
  DistributedDataParallel ddp(net, pg);
  auto x = rank_input(*pg, 2, 4);
  const auto local = torch::full({1, 4}, 2.0 * (pg->rank() + 1));  // sum over the batch of x
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
  std::cout << "unarmed ok" << std::endl;
  return 0;
}

}  // namespace worker_helper
