// ddp-worker-bench: what data parallelism costs with ddp_worker on this
// machine. Run one process per rank (ddp-launch --use_env ...);
// bench/worker/bench_worker.py drives it beside the Python reference.
//
//   ddp-worker-bench step [model=mlp|cnn batch=N steps=N hidden=N
//                          configs=local,ddp,ddp:cap=inf,... device=cpu|cuda]
//     per-step time (forward, backward, optimizer) of the model trained in
//     several ways in the same processes, steps interleaved: `local` (no
//     synchronisation: the baseline at the same per-rank batch) and DDP
//     configurations (bucket sizes, views); per DDP configuration also the
//     timeline of a step (see Timeline).
//   ddp-worker-bench allreduce [max_mb=N | sizes=bytes,bytes,...] [order=runtime-first] [compute_ms=N]
//                              [iters=N] [runtime_only=1] [shared=1]
//     allreduce time by message size: ddp::worker::ProcessGroup::allreduce
//     against the raw c10d backend it wraps (ProcessGroupGloo, or
//     ProcessGroupNCCL with DDP_BACKEND=nccl), the order alternating;
//     iters=N calls per size; runtime_only=1: the runtime's alone, back to
//     back (both columns then show it); shared=1: the tensor from
//     ProcessGroup::shared_buffers (as DDP's buckets), summed in place.
//   ddp-worker-bench roof [ops=mm:MxKxN,conv3x3:BxCxSxO,...] [threads=N] [seconds=S]
//     the practical FP32 roof of this machine through this LibTorch: GFLOP/s
//     of a matrix product (its BLAS) and of a 3x3 convolution (oneDNN) on N
//     intra-op threads (default 1), the best over about S seconds an op (no
//     process group; one line per op per process, so several processes
//     under ddp-launch measure the cores together, as a training job does).
//   ddp-worker-bench heartbeat file=PATH [n=N]
//     what the progress heartbeat costs per collective: the runtime's
//     recorder (worker/src/heartbeat_recorder.h) entering and finishing N
//     collectives on a page it creates at PATH (no process group).
// Rank 0 prints the results; every number is a median.

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
#include "ddp/fashion/model.h"
#include "heartbeat_recorder.h"

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

// The benchmark's models. mlp: 256 -> hidden -> hidden -> hidden -> 10.
// cnn: ddp-train's Fashion-MNIST CNN (the model of the main job).
struct Model {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

Model make_model(const std::string& name, int hidden) {
  if (name == "mlp") {
    auto m = std::make_shared<Mlp>(hidden);
    return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
  }
  if (name == "cnn") {
    auto m = std::make_shared<ddp::fashion::FashionCnn>();
    return {m, [m](const torch::Tensor& x) { return m->forward(x); }};
  }
  throw std::invalid_argument("model=" + name + " is not a benchmark model; use mlp or cnn");
}

// One way of training the model: "local" (no synchronisation at all) or
// "ddp[:cap=MiB][:first=MiB][:views=0]" (DDP with those options; cap=inf:
// one bucket launched after backward, i.e. no overlap).
struct Config {
  std::string name;
  bool ddp = false;
  DDPOptions options;
};

Config parse_config(const std::string& text) {
  Config c;
  c.name = text;
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  if (parts.empty() || (parts[0] != "local" && parts[0] != "ddp"))
    throw std::invalid_argument("config '" + text + "': expected local or ddp[:cap=MiB][:first=MiB][:views=0]");
  c.ddp = parts[0] == "ddp";
  c.options.record_events = true;
  for (size_t i = 1; i < parts.size(); ++i) {
    auto eq = parts[i].find('=');
    const std::string k = parts[i].substr(0, eq), v = eq == std::string::npos ? "" : parts[i].substr(eq + 1);
    if (!c.ddp) throw std::invalid_argument("config '" + text + "': local takes no options");
    if (k == "cap" || k == "first") {
      const double mb = v == "inf" ? 1e6 : std::stod(v);
      (k == "cap" ? c.options.bucket_cap_mb : c.options.first_bucket_mb) = mb;  // unset: the defaults
      if (v == "inf") c.options.first_bucket_mb = c.options.bucket_cap_mb = mb;
    } else if (k == "views") {
      c.options.gradient_as_bucket_view = v != "0";
    } else {
      throw std::invalid_argument("config '" + text + "': unknown option '" + k + "' (cap, first, views)");
    }
  }
  return c;
}

// Where the time of one DDP step goes, from the DDPEvents and the bench's
// own clock: forward, backward until autograd finished, the wait at the end
// of backward (remaining allreduces + the status exchange), the optimizer;
// per bucket the delay from its last gradient to its launch and the
// allreduce itself (launch to completion).
struct Timeline {
  std::vector<double> forward, backward, end_wait, optimizer;
  std::vector<std::vector<double>> launch_delay, allreduce;  // [bucket][step]
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void add_step_timeline(Timeline& t, const DistributedDataParallel& ddp, Clock::time_point start,
                       Clock::time_point backward_start, Clock::time_point end) {
  const auto& buckets = ddp.buckets();
  std::vector<size_t> bucket_of;
  for (size_t b = 0; b < buckets.size(); ++b)
    for (size_t p : buckets[b].parameter_indices) {
      if (p >= bucket_of.size()) bucket_of.resize(p + 1, 0);
      bucket_of[p] = b;
    }
  std::vector<Clock::time_point> last_grad(buckets.size()), launched(buckets.size()), reduced(buckets.size());
  Clock::time_point computed{}, finished{};
  for (const auto& e : ddp.events()) {
    switch (e.kind) {
      case DDPEvent::Kind::GradReady:
        last_grad[bucket_of.at(e.index)] = std::max(last_grad[bucket_of.at(e.index)], e.time);
        break;
      case DDPEvent::Kind::BucketLaunched: launched.at(e.index) = e.time; break;
      case DDPEvent::Kind::BucketReduced: reduced.at(e.index) = e.time; break;
      case DDPEvent::Kind::BackwardComputed: computed = e.time; break;
      case DDPEvent::Kind::BackwardFinished: finished = e.time; break;
    }
  }
  if (computed == Clock::time_point{} || finished == Clock::time_point{})
    throw std::runtime_error("a DDP step recorded no end of backward");
  t.forward.push_back(ms_between(start, backward_start));
  t.backward.push_back(ms_between(backward_start, computed));
  t.end_wait.push_back(ms_between(computed, finished));
  t.optimizer.push_back(ms_between(finished, end));
  t.launch_delay.resize(buckets.size());
  t.allreduce.resize(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    // A bucket completed only by the end of backward (a missing gradient)
    // has no GradReady for its last parameter: count from autograd's end.
    const auto ready = last_grad[b] == Clock::time_point{} ? computed : last_grad[b];
    t.launch_delay[b].push_back(ms_between(ready, launched[b]));
    if (reduced[b] != Clock::time_point{}) t.allreduce[b].push_back(ms_between(launched[b], reduced[b]));
  }
}

// Every configuration trains its own copy of the same model in the same
// processes, stepped in turn (the order rotating) so that all see the same
// machine load. Rank 0 prints, per configuration,
//   RESULT c++ <model> <config> <median step ms> <buckets> <params> <batch>
//   TIMELINE c++ <model> <config> fwd=.. bwd=.. end_wait=.. opt=.. buckets=<delay>/<allreduce>,...
int step_bench(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int batch = get_int(kv, "batch", 64), steps = get_int(kv, "steps", 30), hidden = get_int(kv, "hidden", 768);
  const std::string model_name = kv.count("model") ? kv["model"] : "mlp";
  const std::string config_list = kv.count("configs") ? kv["configs"] : "local,ddp,ddp:cap=inf";
  auto env = DistEnv::from_environment(argc, argv);
  const bool cuda = kv.count("device") && kv["device"] == "cuda";
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank))
                                    : torch::Device(torch::kCPU);
  auto pg = init_process_group({}, argc, argv);
  if (pg->device() != device)
    throw std::invalid_argument("device=" + device.str() + " but the " + pg->backend() + " process group works on " +
                                pg->device().str() + " (DDP_BACKEND=nccl for CUDA)");
  struct Run {
    Config config;
    Model model;
    std::unique_ptr<DistributedDataParallel> ddp;
    std::unique_ptr<torch::optim::SGD> opt;
    std::vector<double> ms;
    Timeline timeline;
    double last_loss = 0;
  };
  std::vector<Run> runs;
  std::stringstream configs(config_list);
  for (std::string c; std::getline(configs, c, ',');) {
    Run r;
    r.config = parse_config(c);
    torch::manual_seed(0);
    r.model = make_model(model_name, hidden);
    r.model.module->to(device);
    if (r.config.ddp) r.ddp = std::make_unique<DistributedDataParallel>(r.model.module, pg, r.config.options);
    r.opt = std::make_unique<torch::optim::SGD>(r.model.module->parameters(),
                                                torch::optim::SGDOptions(0.01).momentum(0.9));
    runs.push_back(std::move(r));
  }
  torch::manual_seed(1 + env.rank);
  auto x = (model_name == "cnn" ? torch::randn({batch, 1, 28, 28}) : torch::randn({batch, 256})).to(device);
  auto y = torch::randint(0, 10, {batch}).to(device);
  const int warmup = 3;
  for (int s = 0; s < steps + warmup; ++s) {
    for (size_t k = 0; k < runs.size(); ++k) {
      auto& r = runs[(s + k) % runs.size()];  // rotate the order too
      barrier(*pg);  // every step starts together on all ranks
      if (r.ddp) r.ddp->clear_events();
      const auto t0 = Clock::now();
      if (r.ddp) r.ddp->prepare_forward();
      r.opt->zero_grad();
      auto loss = torch::cross_entropy_loss(r.model.forward(x), y);
      const auto t_backward = Clock::now();
      loss.backward();
      const auto t_backward_end = Clock::now();
      r.opt->step();
      if (cuda) torch::cuda::synchronize();
      const auto t_end = Clock::now();
      if (s >= warmup) {
        r.ms.push_back(ms_between(t0, t_end));
        if (r.ddp) {
          add_step_timeline(r.timeline, *r.ddp, t0, t_backward, t_end);
        } else {
          r.timeline.forward.push_back(ms_between(t0, t_backward));
          r.timeline.backward.push_back(ms_between(t_backward, t_backward_end));
          r.timeline.end_wait.push_back(0);
          r.timeline.optimizer.push_back(ms_between(t_backward_end, t_end));
        }
      }
      r.last_loss = loss.item<double>();
    }
  }
  int64_t params = 0;
  for (auto& p : runs[0].model.module->parameters()) params += p.numel();
  // The baseline a synchronous job cannot beat: per step, the slowest rank's
  // local time (the steps start together). Its gap to `local` is the ranks'
  // skew on this machine, which DDP pays at every step's allreduce.
  std::vector<double> slowest;
  for (auto& r : runs) {
    if (r.config.ddp) continue;
    auto mine = torch::tensor(r.ms, torch::kDouble);
    auto all = torch::stack(all_gather(*pg, mine.to(pg->device()))).cpu();
    auto worst = std::get<0>(all.max(0));
    slowest.assign(worst.data_ptr<double>(), worst.data_ptr<double>() + worst.numel());
    break;
  }
  for (auto& r : runs) {
    if (!std::isfinite(r.last_loss)) throw std::runtime_error(r.config.name + ": loss is not finite");
    if (env.rank != 0) continue;
    std::printf("RESULT c++ %s %s %.3f %zu %lld %d\n", model_name.c_str(), r.config.name.c_str(), median(r.ms),
                r.ddp ? r.ddp->buckets().size() : size_t{0}, static_cast<long long>(params), batch);
    if (!r.ddp && !slowest.empty())
      std::printf("RESULT c++ %s local-slowest %.3f 0 %lld %d\n", model_name.c_str(), median(slowest),
                  static_cast<long long>(params), batch);
    const auto& t = r.timeline;
    std::printf("TIMELINE c++ %s %s fwd=%.2f bwd=%.2f end_wait=%.2f opt=%.2f buckets=", model_name.c_str(),
                r.config.name.c_str(), median(t.forward), median(t.backward), median(t.end_wait), median(t.optimizer));
    for (size_t b = 0; b < t.launch_delay.size(); ++b)
      std::printf("%s%.2f/%.2f/%.2fMB", b ? "," : "", median(t.launch_delay[b]), median(t.allreduce[b]),
                  r.ddp->buckets()[b].bytes / 1048576.0);
    std::printf("\n");
  }
  std::fflush(stdout);
  return 0;
}

int allreduce_bench(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int max_mb = get_int(kv, "max_mb", 64);
  std::vector<size_t> sizes;  // bytes
  if (kv.count("sizes")) {
    std::stringstream in(kv["sizes"]);
    for (std::string v; std::getline(in, v, ',');) sizes.push_back(std::stoull(v) / 4 * 4);
  } else {
    for (size_t bytes = 4096; bytes <= static_cast<size_t>(max_mb) << 20; bytes *= 4) sizes.push_back(bytes);
  }
  const bool fixed_order = kv.count("order") && kv["order"] == "runtime-first";
  const bool runtime_only = get_int(kv, "runtime_only", 0) != 0;
  // compute_ms=N: each rank computes about N ms (matrix products, one
  // thread) after the barrier and before the allreduce, as a training step
  // does before its gradients go out; the allreduce is then timed alone.
  const int compute_ms = get_int(kv, "compute_ms", 0);
  auto busy_a = torch::randn({256, 256}), busy_b = torch::randn({256, 256});
  auto compute = [&] {
    const auto until = Clock::now() + std::chrono::milliseconds(compute_ms);
    while (Clock::now() < until) busy_a = torch::tanh(torch::mm(busy_a, busy_b) * 1e-3);
  };
  auto pg = init_process_group({}, argc, argv);
  auto raw = native_backend(*pg);
  const bool cuda = pg->device().is_cuda();
  for (size_t bytes : sizes) {
    auto t = torch::ones({static_cast<int64_t>(bytes / 4)}, torch::TensorOptions().device(pg->device()));
    if (get_int(kv, "shared", 0) != 0) {
      std::string why;
      auto shared = pg->shared_buffers({{t.numel(), at::kFloat}}, &why);
      if (shared.empty()) throw std::runtime_error("shared=1: no shared buffers: " + why);
      t = shared[0];
    }
    const int iters = get_int(kv, "iters", bytes <= (1 << 20) ? 60 : bytes <= (16 << 20) ? 16 : 6);
    std::vector<double> wrapped, direct;
    auto time_one = [&](bool through_runtime) {
      t.fill_(1);  // the same values every time (sums would grow to inf)
      barrier(*pg);
      if (compute_ms > 0) compute();
      const auto t0 = Clock::now();
      if (through_runtime) {
        pg->allreduce(t);
      } else {
        std::vector<at::Tensor> v{t};
        raw->allreduce(v)->wait();
      }
      if (cuda) torch::cuda::synchronize();
      return ms_between(t0, Clock::now());
    };
    for (int i = 0; i < iters + 2; ++i) {
      // Alternate which goes first, so that neither always follows the other
      // (order=runtime-first: the old fixed order, for comparison).
      const bool runtime_first = fixed_order || i % 2 == 0;
      const double a = time_one(runtime_first || runtime_only), b = runtime_only ? a : time_one(!runtime_first);
      if (i < 2) continue;
      wrapped.push_back(runtime_first ? a : b);
      direct.push_back(runtime_first ? b : a);
    }
    if (pg->rank() == 0) {
      const double mw = median(wrapped), md = median(direct);
      std::printf("ALLREDUCE %zu %.3f %.3f\n", bytes, mw, md);
    }
  }
  std::fflush(stdout);
  return 0;
}

// Prints HEARTBEAT <ns per collective (started + finished)> <n>, the best of
// 5 runs of n (the least disturbed by the machine's other work).
int heartbeat_bench(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  if (!kv.count("file")) throw std::invalid_argument("heartbeat: file=PATH is required (a new file)");
  const int n = get_int(kv, "n", 10000000);
  auto creator = ddp::Heartbeat::create(kv["file"]);  // the launcher's side
  CollectiveRecorder rec(ddp::Heartbeat::attach(kv["file"]));
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) rec.finished(rec.started(ddp::CollectiveKind::Allreduce, static_cast<uint64_t>(i)));
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  const auto s = creator->read();
  if (s.collective_finished != s.collective_started || s.collective_started != 5ull * static_cast<uint64_t>(n))
    throw std::runtime_error("heartbeat: the page does not show the collectives recorded");
  std::printf("HEARTBEAT %.2f %d\n", best, n);
  std::fflush(stdout);
  return 0;
}

// Prints ROOF <rank> <op> <threads> <GFLOP/s> for each op: the best rate
// over about `seconds` an op, after one warm-up call. Ops:
//   mm:MxKxN          at::mm of (M x K) by (K x N): 2MKN FLOPs
//   conv3x3:BxCxSxO   a 3x3 convolution, padding 1, of B images of C channels,
//                     S x S, into O channels: 2*B*S*S*O*C*9 FLOPs (the
//                     direct count, whatever algorithm oneDNN picks), in
//                     NCHW and in channels-last memory (oneDNN reorders NCHW
//                     to and from its blocked layout; channels last it reads
//                     and writes as they are), the faster of the two
int roof_bench(int argc, char** argv) {
  auto kv = parse_kv(argc, argv);
  const int threads = get_int(kv, "threads", 1);
  double seconds = 2.0;
  if (kv.count("seconds")) {
    char* end = nullptr;
    seconds = std::strtod(kv["seconds"].c_str(), &end);
    if (end == kv["seconds"].c_str() || *end != '\0' || !(seconds > 0 && seconds <= 3600))
      throw std::invalid_argument("roof: seconds=" + kv["seconds"] + " is not a number of seconds in (0, 3600]");
  }
  const std::string ops = kv.count("ops") ? kv["ops"] : "mm:2048x2048x2048,conv3x3:16x256x28x256";
  const char* rank = std::getenv("RANK");
  torch::set_num_threads(threads);
  torch::NoGradGuard no_grad;
  std::stringstream list(ops);
  for (std::string op; std::getline(list, op, ',');) {
    const auto colon = op.find(':');
    const std::string kind = op.substr(0, colon == std::string::npos ? 0 : colon);
    std::vector<long> d;
    if (colon != std::string::npos) {
      std::stringstream dims(op.substr(colon + 1));
      for (std::string v; std::getline(dims, v, 'x');) {
        char* end = nullptr;
        const long x = std::strtol(v.c_str(), &end, 10);
        d.push_back(end != v.c_str() && *end == '\0' && x > 0 ? x : -1);
      }
    }
    const bool ok = (kind == "mm" && d.size() == 3) || (kind == "conv3x3" && d.size() == 4);
    if (!ok || std::count(d.begin(), d.end(), -1) > 0)
      throw std::invalid_argument("roof: '" + op + "' is not mm:MxKxN or conv3x3:BxCxSxO with positive sizes");
    torch::manual_seed(0);
    std::vector<std::function<void()>> calls;  // the ways to run it; the best rate of any counts
    double flops = 0;
    at::Tensor a, b, c, a_last, b_last;
    if (kind == "mm") {
      a = torch::randn({d[0], d[1]}), b = torch::randn({d[1], d[2]}), c = torch::empty({d[0], d[2]});
      calls.push_back([&] { at::mm_out(c, a, b); });
      flops = 2.0 * d[0] * d[1] * d[2];
    } else {
      a = torch::randn({d[0], d[1], d[2], d[2]}), b = torch::randn({d[3], d[1], 3, 3});
      a_last = a.contiguous(at::MemoryFormat::ChannelsLast), b_last = b.contiguous(at::MemoryFormat::ChannelsLast);
      calls.push_back([&] { c = torch::conv2d(a, b, {}, 1, 1); });
      calls.push_back([&] { c = torch::conv2d(a_last, b_last, {}, 1, 1); });
      flops = 2.0 * d[0] * d[2] * d[2] * d[3] * d[1] * 9;
    }
    double best = 0;
    for (const auto& call : calls) {
      call();  // warm-up: the kernel's first use
      const auto until = Clock::now() + std::chrono::duration<double>(seconds / calls.size());
      do {
        const auto t0 = Clock::now();
        call();
        best = std::max(best, flops / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
      } while (Clock::now() < until);
    }
    std::printf("ROOF %s %s %d %.1f\n", rank ? rank : "0", op.c_str(), threads, best);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main(argc, argv, [](int argc, char** argv) -> int {
    if (argc < 2) throw std::invalid_argument("usage: ddp-worker-bench step|allreduce|heartbeat|roof [key=value ...]");
    const std::string what = argv[1];
    if (what == "step") return step_bench(argc, argv);
    if (what == "allreduce") return allreduce_bench(argc, argv);
    if (what == "heartbeat") return heartbeat_bench(argc, argv);
    if (what == "roof") return roof_bench(argc, argv);
    throw std::invalid_argument("unknown benchmark '" + what + "'");
  });
}
