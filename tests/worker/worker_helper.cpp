// ddp-worker-test-helper: the multi-rank programs the worker tests spawn (one
// process per rank, environment set by the test or by ddp-launch). Every mode
// runs under run_main, so a failure becomes exit code 1 plus a message, never
// a hang: the tests bound every run with a timeout.
//
//   ddp-worker-test-helper <mode> [key=value ...]
// modes: init, collectives, parity, overlap, unused, mismatch, interop,
//        throw, ckpt-loop, train-forever, nosync-unused, frozen-mismatch,
//        unused-one-rank, hook-throw, backward-throws, throws-after-reduction, unarmed,
//        rank0-decides, alloc-faults, heartbeat, stall-step

#include <torch/torch.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include "ddp/worker/checkpoint.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/malloc_tuning.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/process_group_native.h"
#include "ddp/worker/run_main.h"
#include "ddp/worker/training_step.h"
#include "ddp/common/heartbeat.h"

using namespace ddp::worker;

namespace {

std::map<std::string, std::string> parse_kv(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--local_rank", 0) == 0 || a.rfind("--local-rank", 0) == 0) continue;
    auto eq = a.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("expected key=value, got '" + a + "'");
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return kv;
}

std::string arg(const std::map<std::string, std::string>& kv, const std::string& k, const std::string& def) {
  auto it = kv.find(k);
  return it == kv.end() ? def : it->second;
}

void check(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// ---- parity ------------------------------------------------------------------

struct ParityNet : torch::nn::Module {
  ParityNet() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 1));
    // A buffer with a rank-dependent start value: equal on all ranks only if
    // DDP broadcast it from rank 0.
    scale = register_buffer("scale", torch::randn({3}));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  torch::Tensor scale;
};

// What Optimizer::zero_grad does in LibTorch 1.13 (2.x's default is
// set_to_none instead): detach and zero each .grad in place.
void zero_grads_in_place(const std::vector<at::Tensor>& params) {
  for (auto p : params)
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
}

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

// ---- overlap -------------------------------------------------------------------

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

// ---- unused parameters, mismatched models -------------------------------------

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

// `steps` DDP steps of ParityNet (seed 0), each announced with the
// runtime's step call; `before(step)` runs after that call, `after(step)`
// once the step's optimizer step is done.
template <class PG>
void parity_steps(const PG& pg, int steps, const std::function<void(int)>& before,
                  const std::function<void(int)>& after) {
  torch::manual_seed(0);
  auto net = std::make_shared<ParityNet>();
  DDP<ParityNet> ddp(net, pg);
  torch::optim::SGD opt(ddp.parameters(), torch::optim::SGDOptions(0.01));
  auto x = torch::randn({8, 8}), y = torch::randn({8, 1});
  for (int step = 1; step <= steps; ++step) {
    training_step(pg, static_cast<std::uint64_t>(step));
    before(step);
    opt.zero_grad();
    torch::mse_loss(ddp.forward(x), y).backward();
    opt.step();
    after(step);
  }
}

// DDP steps with the runtime's step call; rank `stall_rank` stops at step
// `stall_at` (writes <out>/stalled.<rank>, then sleeps 120 s in its step, no
// collective), unless this is a restart (TORCHELASTIC_RESTART_COUNT > 0):
// then every rank runs `steps` steps and exits 0.
int stall_step(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int steps = std::stoi(arg(kv, "steps", "40"));
  const int stall_rank = std::stoi(arg(kv, "stall_rank", "1"));
  const int stall_at = std::stoi(arg(kv, "stall_at", "20"));
  const std::string out = arg(kv, "out", ".");
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool restarted = restart && std::string(restart) != "0";
  auto pg = init_process_group({}, argc, argv);
  parity_steps(
      pg, steps,
      [&](int step) {
        if (restarted || step != stall_at || pg->rank() != stall_rank) return;
        std::ofstream(out + "/stalled." + std::to_string(pg->rank())) << step;
        std::this_thread::sleep_for(std::chrono::seconds(120));
      },
      [](int) {});
  std::cout << "stall-step done on rank " << pg->rank() << (restarted ? " (restarted)" : "") << std::endl;
  return 0;
}

// `steps` DDP steps in which every rank "works" work_ms (a sleep: no core
// is taken, so 4 ranks fit on 2 cores) and rank slow_rank factor times
// longer; then DDP's allreduce makes the others wait for it. The launcher's
// straggler scores see it (tests/worker/test_straggler_runtime.cpp).
int slow_rank(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int steps = std::stoi(arg(kv, "steps", "100"));
  const int slow = std::stoi(arg(kv, "slow_rank", "1"));
  const double work_ms = std::stod(arg(kv, "work_ms", "20"));
  const double factor = std::stod(arg(kv, "factor", "2"));
  auto pg = init_process_group({}, argc, argv);
  const double mine = pg->rank() == slow ? work_ms * factor : work_ms;
  parity_steps(
      pg, steps, [&](int) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(mine * 1000))); },
      [](int) {});
  std::cout << "slow-rank done on rank " << pg->rank() << std::endl;
  return 0;
}

// ---- failures inside a backward, usage across no_sync, arming ------------------

// x with rank-dependent values, so an average differs from every local value.
torch::Tensor rank_input(const ProcessGroup& pg, int64_t rows, int64_t cols) {
  return torch::ones({rows, cols}) * static_cast<double>(pg.rank() + 1);
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

struct EmbedNet : torch::nn::Module {
  explicit EmbedNet(bool sparse) {
    emb = register_module("emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 4).sparse(sparse)));
    fc = register_module("fc", torch::nn::Linear(4, 1));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr};
};

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

// ---- misc ----------------------------------------------------------------------

int init(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  barrier(pg);
  std::cout << "rank " << pg->rank() << "/" << pg->world_size() << " local " << pg->local_rank() << " backend "
            << pg->backend() << " device " << pg->device() << std::endl;
  return 0;
}

int collectives(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  const int r = pg->rank(), w = pg->world_size();
  const double sum = w * (w + 1) / 2.0;
  check(reduce_sum(pg, r + 1.0) == sum, "reduce_sum of scalars");
  check(reduce_mean(pg, r + 1.0) == sum / w, "reduce_mean of scalars");
  auto t = torch::full({3}, static_cast<float>(r + 1));
  auto m = reduce_mean(pg, t);
  check(torch::allclose(m, torch::full({3}, static_cast<float>(sum / w))), "reduce_mean of a tensor");
  check(t[0].item<float>() == r + 1, "reduce_mean leaves its input alone");
  reduce_sum_(pg, t);
  check(torch::allclose(t, torch::full({3}, static_cast<float>(sum))), "reduce_sum_ in place");
  auto g = all_gather(pg, torch::arange(2) + 10 * r);
  check(static_cast<int>(g.size()) == w, "all_gather returns one tensor per rank");
  for (int i = 0; i < w; ++i) check(torch::equal(g[i], torch::arange(2) + 10 * i), "all_gather order");
  auto nc = torch::zeros({2, 3}).t();  // non-contiguous
  nc.fill_(r + 1);
  pg->allreduce(nc, ReduceOp::Max);
  check(torch::allclose(nc, torch::full({3, 2}, static_cast<float>(w))), "allreduce max of a non-contiguous tensor");
  auto b = torch::full({2}, static_cast<float>(r));
  pg->broadcast(b, w - 1);
  check(torch::allclose(b, torch::full({2}, static_cast<float>(w - 1))), "broadcast from the last rank");
  barrier(pg);
  check(is_main_process(pg) == (r == 0), "is_main_process");
  std::cout << "collectives ok on rank " << r << std::endl;
  return 0;
}

// allreduce_async(target, k) of x: its first k elements averaged, the rest
// summed, bit for bit the sum in rank order of every rank's x with its
// first k elements divided by the world size (Tensor::div_, as DDP's
// gradients before a plain sum). k of 0, a part (the shares split it), all
// but the last (DDP's status tail) and all.
void check_averaged(ProcessGroup& pg, const at::Tensor& x, at::Tensor target, const std::string& what) {
  const auto xs = all_gather(pg, x);
  for (const int64_t k : {int64_t{0}, x.numel() / 3, x.numel() - 1, x.numel()}) {
    target.copy_(x);
    pg.allreduce_async(target, k).wait();
    at::Tensor expected;
    for (const auto& xq : xs) {
      auto v = xq.clone();
      v.narrow(0, 0, k).div_(pg.world_size());
      expected = expected.defined() ? expected + v : v;
    }
    check(torch::equal(target, expected),
          what + ", its first " + std::to_string(k) + " elements averaged, is the average and sum in rank order");
  }
}

// Float sums through shared memory against the same sums through Gloo and
// the sum in rank order: sizes of one element (shares of 0 elements on most
// ranks) to several 1 MiB chunks with a part one, float and double, blocking
// and several queued at once.
int shm(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  const int r = pg->rank(), w = pg->world_size();
  if (!pg->shared_memory_allreduce()) {
    std::cout << "shm off: " << pg->shared_memory_off_reason() << std::endl;
    for (int64_t n : {3, 262149}) {
      torch::manual_seed(static_cast<uint64_t>(r));
      const auto x = torch::randn({n});
      check_averaged(*pg, x, x.clone(), "a sum of " + std::to_string(n) + " elements on Gloo");
    }
    return 0;
  }
  std::cout << "shm on" << std::endl;
  auto gloo = native_backend(*pg);
  const std::vector<std::pair<int64_t, at::ScalarType>> cases = {
      {1, at::kFloat}, {3, at::kFloat}, {262149, at::kFloat}, {786439, at::kFloat}, {600001, at::kDouble}};
  std::vector<at::Tensor> inputs, expected;
  for (size_t i = 0; i < cases.size(); ++i) {
    torch::manual_seed(static_cast<uint64_t>(1000 * r + i));
    auto x = torch::randn({cases[i].first}, torch::TensorOptions().dtype(cases[i].second));
    auto viashm = x.clone();
    pg->allreduce(viashm);
    std::vector<at::Tensor> v{x.clone()};
    gloo->allreduce(v)->wait();
    const std::string what = "sum of " + std::to_string(cases[i].first) + " elements";
    if (w == 2) check(torch::equal(viashm, v[0]), what + " is bit-for-bit Gloo's");
    else check(torch::allclose(viashm, v[0], 1e-5, 1e-6), what + " is Gloo's up to rounding");
    // The documented order, ((x0 + x1) + x2) + ..., whichever rank sums which share.
    const auto xs = all_gather(pg, x);
    auto in_order = xs[0].clone();
    for (size_t q = 1; q < xs.size(); ++q) in_order += xs[q];
    check(torch::equal(viashm, in_order), what + " is the sum in rank order");
    check_averaged(*pg, x, x.clone(), what + " through the slots");
    for (const auto& other : all_gather(pg, viashm)) check(torch::equal(other, viashm), what + " is the same on every rank");
    inputs.push_back(x);
    expected.push_back(viashm);
  }
  // Queued back to back, waited at the end: the same results.
  std::vector<at::Tensor> queued;
  std::vector<AsyncWork> works;
  for (auto& x : inputs) {
    queued.push_back(x.clone());
    works.push_back(pg->allreduce_async(queued.back()));
  }
  for (auto& wk : works) wk.wait();
  for (size_t i = 0; i < queued.size(); ++i) check(torch::equal(queued[i], expected[i]), "queued sums equal blocking ones");
  // Shared buffers (DDP's buckets), summed in place: the same sums, queued
  // together and one after another, twice over the same memory.
  std::vector<std::pair<int64_t, at::ScalarType>> sizes;
  for (const auto& c : cases) sizes.emplace_back(c.first, c.second);
  auto shared = pg->shared_buffers(sizes);
  check(shared.size() == cases.size(), "shared buffers are made");
  std::cout << "shm buffers on" << std::endl;
  for (int round = 0; round < 2; ++round) {
    works.clear();
    for (size_t i = 0; i < shared.size(); ++i) {
      check(round > 0 || torch::equal(shared[i], torch::zeros_like(shared[i])), "a shared buffer starts zeroed");
      shared[i].copy_(inputs[i]);
      works.push_back(pg->allreduce_async(shared[i]));
    }
    for (auto& wk : works) wk.wait();
    for (size_t i = 0; i < shared.size(); ++i)
      check(torch::equal(shared[i], expected[i]), "the sum of " + std::to_string(cases[i].first) +
                                                      " elements in a shared buffer is the one through the slots");
  }
  for (size_t i = 0; i < shared.size(); ++i)
    check_averaged(*pg, inputs[i], shared[i], "the sum of " + std::to_string(cases[i].first) + " elements in a shared buffer");
  // A count outside the tensor is refused on the calling rank, before any collective.
  for (const int64_t bad : {int64_t{-1}, shared[1].numel() + 1}) {
    try {
      pg->allreduce_async(shared[1], bad);
      check(false, "averaging " + std::to_string(bad) + " elements of 3 is refused");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      check(what.find(": cannot average its first " + std::to_string(bad) + " elements") != std::string::npos,
            "the refusal names the count: " + what);
    }
  }
  barrier(pg);
  // Ranks that reduce different buffers fail together, naming both.
  try {
    auto mismatched = shared[static_cast<size_t>(r % 2)].narrow(0, 0, 1);
    pg->allreduce(mismatched);
    check(false, "reducing different shared buffers fails");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    check(what.find("the ranks called different collectives") != std::string::npos, "the mismatch says so: " + what);
  }
  std::cout << "shm ok on rank " << r << std::endl;
  return 0;
}

// Shared buffers of floats=N floats: "buffers on" with their sum checked,
// or "buffers off: <why>". Then, with ddp=1, a DDP whose one bucket holds
// N floats (their own buffers gone first), and a step.
int shm_room(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  auto pg = init_process_group({}, argc, argv);
  if (!pg->shared_memory_allreduce()) {
    std::cout << "shm off: " << pg->shared_memory_off_reason() << std::endl;
    return 0;
  }
  const int64_t floats = std::stoll(arg(kv, "floats", "1024"));
  std::string why;
  auto b = pg->shared_buffers({{floats, at::kFloat}}, &why);
  if (b.empty()) {
    std::cout << "buffers off: " << why << std::endl;
  } else {
    const int w = pg->world_size();
    b[0].fill_(pg->rank() + 1);
    pg->allreduce(b[0]);
    check(torch::equal(b[0], torch::full_like(b[0], w * (w + 1) / 2)), "the sum in a shared buffer");
    std::cout << "buffers on" << std::endl;
  }
  b.clear();
  if (arg(kv, "ddp", "0") == "1") {
    // Every parameter frozen: no bucket, so no memory to ask for (and nothing to note).
    torch::nn::Linear frozen(4, 4);
    for (auto& p : frozen->parameters()) p.requires_grad_(false);
    DistributedDataParallel none(frozen.ptr(), pg);
    torch::nn::Linear net(floats / 64, 64);
    DistributedDataParallel ddp(net.ptr(), pg);
    ddp.forward<torch::nn::LinearImpl>(torch::ones({2, floats / 64})).sum().backward();
    check(torch::allclose(net->bias.grad(), torch::full({64}, 2.0f)), "the averaged gradient");
    std::cout << "ddp step done" << std::endl;
  }
  return 0;
}

int interop(int argc, char** argv) {
  auto pg = init_process_group({}, argc, argv);
  auto t = torch::full({4}, static_cast<float>(pg->rank() + 1));
  pg->allreduce(t);
  auto g = pg->all_gather(torch::tensor({static_cast<float>(pg->rank() * 10)}));
  std::cout << "result " << t[0].item<float>() << " " << t[3].item<float>() << " gather";
  for (auto& x : g) std::cout << " " << x.item<float>();
  std::cout << std::endl;
  return 0;
}

struct DeliberateFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int throw_mode(int argc, char** argv) {
  throw DeliberateFailure("deliberate failure from rank " + std::string(std::getenv("RANK") ? std::getenv("RANK") : "?"));
}

// Saves checkpoints of a ~16 MB model forever, epoch 1, 2, ...; the test
// kills it with SIGKILL at a moment when a save is in progress.
int ckpt_loop(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const std::string path = arg(kv, "path", "");
  auto net = std::make_shared<torch::nn::LinearImpl>(2048, 2048);
  for (int64_t epoch = 1;; ++epoch) {
    {
      torch::NoGradGuard ng;
      net->weight.fill_(static_cast<float>(epoch));
    }
    auto c = make_checkpoint(*net, nullptr, epoch, epoch * 10);
    save_checkpoint(path, c);
    std::cout << "saved " << epoch << std::endl;
  }
}

// rank0-decides fail=0|1: rank 0 decides a value (or throws when fail=1);
// every rank prints what it got, twice in a row, so a rank left behind in a
// collective would hang the second round.
int rank0_decides_mode(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const bool fail = arg(kv, "fail", "0") == "1";
  auto pg = init_process_group({}, argc, argv);
  for (int round = 1; round <= 2; ++round) {
    const std::string got = rank0_decides(*pg, [&]() -> std::string {
      if (fail) throw std::runtime_error("rank 0 cannot decide round " + std::to_string(round));
      return "decision " + std::to_string(round) + std::string(3, '\0') + "end";
    });
    std::cout << "rank " << pg->rank() << " got '" << got.substr(0, 10) << "' length " << got.size() << std::endl;
  }
  const auto n = rank0_decides_int(*pg, [] { return std::int64_t{-42}; });
  std::cout << "rank " << pg->rank() << " int " << n << std::endl;
  return 0;
}

// alloc-faults: a training step's allocation pattern (several multi-MiB
// tensors alive together, then all freed) repeated; prints the minor page
// faults per step after a warm-up, and the malloc settings in force.
int alloc_faults(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int steps = std::stoi(arg(kv, "steps", "20"));
  auto step = [] {
    std::vector<torch::Tensor> alive;
    for (std::int64_t mib : {6, 3, 3, 2, 2, 1, 6, 3}) alive.push_back(torch::ones({mib << 18}));  // float32
    float sum = 0;
    for (auto& t : alive) sum += t[0].item<float>();
    return sum;
  };
  for (int i = 0; i < 10; ++i) step();  // warm-up: the heap reaches its size
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  for (int i = 0; i < steps; ++i) step();
  ::getrusage(RUSAGE_SELF, &after);
  const auto& t = malloc_tuning();
  std::cout << "minor faults per step " << (after.ru_minflt - before.ru_minflt) / steps << "\n"
            << "malloc tuning " << (t.applied ? "applied" : "skipped: " + t.skipped_because) << std::endl;
  return 0;
}

// ---- progress heartbeat --------------------------------------------------------

// DDP_HEARTBEAT_FILE: a fixed sequence of collectives of every kind and path
// (shared memory and Gloo sums, async, host, broadcast, all_gather,
// barrier), counted here as they are issued and printed as
// "issued N"; then `steps` DDP steps (training_step at the start of each),
// printing per step "step k collectives d" read back through a mapping of
// its own; then with stuck=1 a last allreduce of 1000 floats that rank
// `late` joins only once the file `go` exists (bounded wait).
int heartbeat(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int steps = std::stoi(arg(kv, "steps", "0"));
  auto pg = init_process_group({}, argc, argv);
  const int r = pg->rank();
  int issued = 0;
  auto f = torch::full({5}, 1.0f);
  pg->allreduce(f), ++issued;                       // shared memory when on
  auto i = torch::full({3}, static_cast<int64_t>(r));
  pg->allreduce(i, ReduceOp::Max), ++issued;        // Gloo
  auto nc = torch::zeros({2, 3}).t();
  pg->allreduce(nc, ReduceOp::Mean), ++issued;
  auto fa = torch::ones({7});
  pg->allreduce_async(fa).wait(), ++issued;
  auto ia = torch::ones({4}, torch::kInt);
  pg->allreduce_async(ia).wait(), ++issued;
  auto h = torch::ones({3}, torch::kLong);
  pg->host_allreduce_async(h).wait(), ++issued;
  auto b = torch::zeros({6});
  pg->broadcast(b, pg->world_size() - 1), ++issued;  // rank 1 of 2 (rank 0 of a group of one)
  pg->broadcast_async(b).wait(), ++issued;
  all_gather(pg, torch::ones({2})), ++issued;
  barrier(pg), ++issued;
  reduce_sum(pg, 1.0), ++issued;
  auto last = torch::zeros({10});
  pg->broadcast(last, 0), ++issued;  // the last one: broadcast of 40 bytes
  std::cout << "issued " << issued << std::endl;

  if (steps > 0) {
    auto own = ddp::Heartbeat::attach(pg->env().heartbeat_file);  // the same page, read back
    uint64_t before = 0;
    parity_steps(
        pg, steps, [&](int) { before = own->read().collective_started; },
        [&](int step) {
          std::cout << "step " << step << " collectives " << own->read().collective_started - before << std::endl;
        });
  }

  if (arg(kv, "stuck", "0") == "1") {
    const int late = std::stoi(arg(kv, "late", "1"));
    if (r == late) {
      const std::string go = arg(kv, "go", "");
      struct stat st;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (::stat(go.c_str(), &st) != 0) {
        check(std::chrono::steady_clock::now() < until, "the test created " + go + " within 60 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    auto t = torch::ones({1000});
    pg->allreduce(t);
    check(t[0].item<float>() == pg->world_size(), "the late allreduce summed");
  }
  std::cout << "heartbeat ok on rank " << r << std::endl;
  return 0;
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

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) -> int {
    if (argc < 2) throw std::invalid_argument("usage: ddp-worker-test-helper <mode> [key=value ...]");
    const std::string mode = argv[1];
    if (mode == "init") return init(argc, argv);
    if (mode == "collectives") return collectives(argc, argv);
    if (mode == "parity") return parity(argc, argv);
    if (mode == "views") return views(argc, argv);
    if (mode == "bucket_sizes") return bucket_sizes(argc, argv);
    if (mode == "unused_keeps_grad") return unused_keeps_grad(argc, argv);
    if (mode == "overlap") return overlap(argc, argv);
    if (mode == "unused") return unused(argc, argv);
    if (mode == "mismatch") return mismatch(argc, argv);
    if (mode == "interop") return interop(argc, argv);
    if (mode == "shm") return shm(argc, argv);
    if (mode == "shm_room") return shm_room(argc, argv);
    if (mode == "throw") return throw_mode(argc, argv);
    if (mode == "ckpt-loop") return ckpt_loop(argc, argv);
    if (mode == "train-forever") return train_forever(argc, argv);
    if (mode == "stall-step") return stall_step(argc, argv);
    if (mode == "slow-rank") return slow_rank(argc, argv);
    if (mode == "nosync-unused") return nosync_unused(argc, argv);
    if (mode == "frozen-mismatch") return frozen_mismatch(argc, argv);
    if (mode == "unused-one-rank") return unused_one_rank(argc, argv);
    if (mode == "hook-throw") return hook_throw(argc, argv);
    if (mode == "backward-throws") return backward_throws(argc, argv);
    if (mode == "throws-after-reduction") return throws_after_reduction(argc, argv);
    if (mode == "unarmed") return unarmed(argc, argv);
    if (mode == "rank0-decides") return rank0_decides_mode(argc, argv);
    if (mode == "alloc-faults") return alloc_faults(argc, argv);
    if (mode == "heartbeat") return heartbeat(argc, argv);
    if (mode == "abort-at-exit") return abort_at_exit(argc, argv);
    throw std::invalid_argument("unknown mode '" + mode + "'");
  });
}
