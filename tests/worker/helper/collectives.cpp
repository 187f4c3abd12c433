// The helper's collectives modes: the process group's init, each
// collective against the expected values, the shared-memory sums against
// Gloo's and against the sum in rank order (with their room and fallbacks),
// interop with Python ranks, rank 0 deciding for every rank.
#include <torch/torch.h>

#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/process_group_native.h"
#include "helper.h"

using namespace ddp::worker;

namespace worker_helper {

namespace {

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

}  // namespace

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

}  // namespace worker_helper
