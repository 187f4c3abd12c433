// The helper's progress modes, for the launcher's stall and straggler
// features: the heartbeat page's collective count, a rank that stalls in its
// step, a rank slower than the others.
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sys/stat.h>
#include <thread>
#include <iostream>
#include <string>

#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/training_step.h"
#include "ddp/common/heartbeat.h"
#include "helper.h"

using namespace ddp::worker;

namespace worker_helper {

namespace {

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

}  // namespace

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

}  // namespace worker_helper
