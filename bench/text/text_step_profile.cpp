// Where ddp-text's step time goes, on one process: per phase (batch
// assembly, forward, backward, optimizer step) for the packed CPU path the
// program uses and the padded stock formulation the Python twin uses, with
// LibTorch's Adam and FusedAdam (as the loop runs it: its step zeroes the
// gradients, step_and_zero_grad, and the next step has none to zero). Real data (a prepared --data_dir), the
// program's model; no DDP (bench_text.py measures whole DDP runs).
//   build/bin/ddp-text-profile DATA_DIR [steps=50] [batch=64] [threads=2]
// Prints one markdown table row per variant: mean milliseconds per phase.
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>
#include <random>

#include "ddp/text/text_cnn.h"
#include "ddp/text/text_dataset.h"
#include "ddp/worker/fused_adam.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point& t) {
  const auto now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t).count();
  t = now;
  return ms;
}

struct Phases {
  double batch = 0, forward = 0, backward = 0, zero = 0, step = 0;
};

void run(const ddp::text::TextData& data, bool packed, bool fused, int steps, int batch) {
  torch::manual_seed(1);
  ddp::text::TextCnnOptions mo;
  mo.vocab_size = static_cast<std::int64_t>(data.vocab.size());
  auto model = std::make_shared<ddp::text::TextCnn>(mo);
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (fused)
    opt = std::make_unique<ddp::worker::FusedAdam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  else
    opt = std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-3));
  std::vector<std::int64_t> order(data.train.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  Phases sum;
  bool zeroed = false;
  for (int s = -5; s < steps; ++s) {  // 5 warm-up steps
    Phases p;
    auto t = Clock::now();
    const std::int64_t* rows = order.data() + static_cast<std::size_t>((s + 5) * batch);
    const auto pk = ddp::text::pack_sequences(data.train, rows, batch);
    auto labels = torch::empty({batch}, torch::kLong);
    for (int b = 0; b < batch; ++b) labels[b] = data.train.labels[static_cast<std::size_t>(rows[b])];
    torch::Tensor padded = packed ? torch::Tensor() : ddp::text::pad_packed(pk);
    p.batch = ms_since(t);
    if (!zeroed)
      for (auto& q : model->parameters())
        if (q.grad().defined()) q.mutable_grad().zero_();
    p.zero = ms_since(t);
    auto logits = packed ? model->forward_packed(pk.packed, pk.lengths) : model->forward(padded, pk.lengths);
    auto loss = torch::nn::functional::cross_entropy(logits, labels);
    p.forward = ms_since(t);
    loss.backward();
    p.backward = ms_since(t);
    if (fused) static_cast<ddp::worker::FusedAdam&>(*opt).step_and_zero_grad();
    else opt->step();
    zeroed = fused;
    p.step = ms_since(t);
    if (s >= 0) {
      sum.batch += p.batch, sum.zero += p.zero, sum.forward += p.forward, sum.backward += p.backward;
      sum.step += p.step;
    }
  }
  const double n = steps;
  const double total = (sum.batch + sum.zero + sum.forward + sum.backward + sum.step) / n;
  std::printf("| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.0f |\n", packed ? "packed" : "padded",
              fused ? "FusedAdam" : "Adam", sum.batch / n, sum.zero / n, sum.forward / n, sum.backward / n,
              sum.step / n, total, 1000.0 * batch / total);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: ddp-text-profile DATA_DIR [steps=50] [batch=64] [threads=2]\n";
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 50;
  const int batch = argc > 3 ? std::atoi(argv[3]) : 64;
  at::set_num_threads(argc > 4 ? std::atoi(argv[4]) : 2);
  const auto data = ddp::text::load_text_data(argv[1], 64);
  std::printf("| input | optimizer | batch ms | zero_grad ms | forward ms | backward ms | step ms | total ms | samples/s |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (bool packed : {true, false})
    for (bool fused : {true, false}) run(data, packed, fused, steps, batch);
  return 0;
}
