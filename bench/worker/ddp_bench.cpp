// ddp-worker-bench: what data parallelism costs with ddp_worker on this
// machine. Run one process per rank (ddp-launch --use_env ... or run.sh).
//
//   ddp-worker-bench step [batch=N steps=N hidden=N device=cpu|cuda]
//     per-step time (forward, backward, optimizer) of an MLP trained three
//     ways in the same processes, steps interleaved: `local` (no
//     synchronisation: the baseline at the same per-rank batch), `ddp`, and
//     `ddp-one-bucket` (all gradients in one bucket launched after backward,
//     i.e. DDP without overlap).
//   ddp-worker-bench allreduce [max_mb=N]
//     allreduce time by message size: ddp::worker::ProcessGroup::allreduce
//     against the raw c10d backend it wraps (ProcessGroupGloo, or
//     ProcessGroupNCCL with DDP_BACKEND=nccl).
// Rank 0 prints markdown table rows; every number is a median.

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/env.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/process_group_native.h"
#include "ddp/worker/run_main.h"

using namespace ddp::worker;
using Clock = std::chrono::steady_clock;

namespace {

std::map<std::string, std::string> parse_kv(int argc, char** argv) {
  std::map<std::string, std::string> kv;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("expected key=value, got '" + a + "'");
    kv[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return kv;
}

int get_int(const std::map<std::string, std::string>& kv, const std::string& k, int def) {
  auto it = kv.find(k);
  return it == kv.end() ? def : std::stoi(it->second);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Mlp : torch::nn::Module {
  explicit Mlp(int hidden) {
    l1 = register_module("l1", torch::nn::Linear(256, hidden));
    l2 = register_module("l2", torch::nn::Linear(hidden, hidden));
    l3 = register_module("l3", torch::nn::Linear(hidden, hidden));
    l4 = register_module("l4", torch::nn::Linear(hidden, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    return l4(torch::relu(l3(torch::relu(l2(torch::relu(l1(x)))))));
  }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, l3{nullptr}, l4{nullptr};
};

// Three copies of the same model in the same processes, stepped in turn so
// that they see the same machine load (this machine is shared): `local` (no
// synchronisation at all), `ddp` (default buckets, overlapped) and
// `ddp-one-bucket` (one bucket launched after backward: no overlap).
int step_bench(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int batch = get_int(kv, "batch", 64), steps = get_int(kv, "steps", 30), hidden = get_int(kv, "hidden", 768);
  auto env = DistEnv::from_environment(argc, argv);
  const bool cuda = kv.count("device") && kv["device"] == "cuda";
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank))
                                    : torch::Device(torch::kCPU);
  auto pg = init_process_group({}, argc, argv);
  if (pg->device() != device)
    throw std::invalid_argument("device=" + device.str() + " but the " + pg->backend() + " process group works on " +
                                pg->device().str() + " (DDP_BACKEND=nccl for CUDA)");
  struct Run {
    std::string name;
    std::shared_ptr<Mlp> net;
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<torch::optim::SGD> opt;
    std::vector<double> ms;
    double last_loss = 0;
  };
  std::vector<Run> runs(3);
  const char* names[] = {"local", "ddp", "ddp-one-bucket"};
  for (int i = 0; i < 3; ++i) {
    auto& r = runs[i];
    r.name = names[i];
    torch::manual_seed(0);
    r.net = std::make_shared<Mlp>(hidden);
    r.net->to(device);
    if (i > 0) {
      DDPOptions o;
      if (i == 2) o.bucket_cap_mb = o.first_bucket_mb = 1 << 20;
      r.ddp = std::make_unique<DistributedDataParallel>(r.net, pg, o);
    }
    r.opt = std::make_unique<torch::optim::SGD>(r.net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  }
  auto x = torch::randn({batch, 256}).to(device);
  auto y = torch::randint(0, 10, {batch}).to(device);
  for (int s = 0; s < steps + 3; ++s) {
    for (int k = 0; k < 3; ++k) {
      auto& r = runs[(s + k) % 3];  // rotate the order too
      if (r.ddp) barrier(*pg);      // start DDP steps together; the local one needs no peer
      const auto t0 = Clock::now();
      if (r.ddp) r.ddp->prepare_forward();
      r.opt->zero_grad();
      auto loss = torch::cross_entropy_loss(r.net->forward(x), y);
      loss.backward();
      r.opt->step();
      if (cuda) torch::cuda::synchronize();
      if (s >= 3) r.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      r.last_loss = loss.item<double>();
    }
  }
  int64_t params = 0;
  for (auto& p : runs[0].net->parameters()) params += p.numel();
  const double base = median(runs[0].ms);
  for (auto& r : runs) {
    if (!std::isfinite(r.last_loss)) throw std::runtime_error(r.name + ": loss is not finite");
    const double m = median(r.ms);
    if (env.rank == 0)
      std::printf("| %s | %d | %.2f M (%.1f MB) | %d | %.2f | %+.1f%% | %s |\n", r.name.c_str(), env.world_size,
                  params / 1e6, params * 4 / 1048576.0, batch, m, 100.0 * (m - base) / base,
                  r.ddp ? std::to_string(r.ddp->buckets().size()).c_str() : "-");
    else
      std::fprintf(stderr, "rank %d %s median %.2f ms\n", env.rank, r.name.c_str(), m);
  }
  return 0;
}

int allreduce_bench(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int max_mb = get_int(kv, "max_mb", 64);
  auto pg = init_process_group({}, argc, argv);
  auto raw = native_backend(*pg);
  const bool cuda = pg->device().is_cuda();
  for (size_t bytes = 4096; bytes <= static_cast<size_t>(max_mb) << 20; bytes *= 4) {
    auto t = torch::ones({static_cast<int64_t>(bytes / 4)}, torch::TensorOptions().device(pg->device()));
    const int iters = bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 5;
    std::vector<double> wrapped, direct;
    for (int i = 0; i < iters + 2; ++i) {
      // Alternate the two so that both see the same machine load.
      barrier(*pg);
      auto t0 = Clock::now();
      pg->allreduce(t);
      if (cuda) torch::cuda::synchronize();
      double a = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      barrier(*pg);
      std::vector<at::Tensor> v{t};
      t0 = Clock::now();
      raw->allreduce(v)->wait();
      if (cuda) torch::cuda::synchronize();
      double b = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (i >= 2) {
        wrapped.push_back(a);
        direct.push_back(b);
      }
    }
    if (pg->rank() == 0) {
      const double mw = median(wrapped), md = median(direct);
      std::printf("| %zu KiB | %.3f | %.0f | %.3f | %.0f |\n", bytes / 1024, mw, bytes / 1048576.0 / (mw / 1000),
                  md, bytes / 1048576.0 / (md / 1000));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) -> int {
    if (argc < 2) throw std::invalid_argument("usage: ddp-worker-bench step|allreduce [key=value ...]");
    const std::string what = argv[1];
    if (what == "step") return step_bench(argc, argv);
    if (what == "allreduce") return allreduce_bench(argc, argv);
    throw std::invalid_argument("unknown benchmark '" + what + "'");
  });
}
