// The helper's DDP modes: parity with one process, gradients as bucket
// views, the overlap of allreduces with backward, unused parameters. The
// reducer's other protocol cases run with ranks as threads
// (tests/worker/test_in_process_reducer.cpp).
#include <torch/torch.h>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
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

}  // namespace worker_helper
