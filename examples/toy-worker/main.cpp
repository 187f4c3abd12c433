// toy-worker: the smallest complete user of the runtime. Each rank fits
// y = 3x - 1 with one Linear layer on its DistributedSampler share of a
// synthetic data set, under DistributedDataParallel; rank 0 prints the
// averaged loss of the first and last epoch and the learned weight and bias.
//   ddp-launch --standalone --nproc_per_node=2 ./toy-worker [EPOCHS]
#include <torch/torch.h>

#include <iostream>
#include <string>

#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/run_main.h"
#include "ddp/worker/sampler.h"

namespace dw = ddp::worker;

int main(int argc, char** argv) {
  return dw::run_main(argc, argv, [](int argc, char** argv) {
    // EPOCHS is the one argument that is not an option: launchers in legacy
    // mode (no --use_env) put --local_rank=N before it.
    int epochs = 20;
    for (int i = 1; i < argc; ++i)
      if (std::string(argv[i]).rfind("--", 0) != 0) epochs = std::stoi(argv[i]);
    auto pg = dw::init_process_group({}, argc, argv);
    torch::manual_seed(0);  // the same data on every rank; DDP broadcasts rank 0's weights anyway
    const auto x = torch::linspace(-1, 1, 256).unsqueeze(1);
    const auto y = 3 * x - 1;

    auto net = torch::nn::Linear(1, 1);
    net->to(pg->device());
    dw::DDP<torch::nn::LinearImpl> model(net.ptr(), pg);
    torch::optim::SGD opt(model.parameters(), 0.1);
    dw::DistributedSampler sampler(x.size(0), pg->world_size(), pg->rank(), /*shuffle=*/true, /*seed=*/1);

    double first = 0, last = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      sampler.set_epoch(epoch);
      const auto idx = torch::tensor(sampler.indices(), torch::kLong);
      double sum = 0;
      int batches = 0;
      for (const auto& b : idx.split(16)) {
        opt.zero_grad();
        auto loss = torch::mse_loss(model.forward(x.index_select(0, b).to(pg->device())),
                                    y.index_select(0, b).to(pg->device()));
        loss.backward();  // gradients averaged over the ranks here
        opt.step();
        sum += loss.item<double>();
        ++batches;
      }
      const double mean = dw::reduce_mean(*pg, sum / batches);
      if (epoch == 0) first = mean;
      last = mean;
    }
    if (dw::is_main_process(*pg))
      std::cout << "toy-worker: world " << pg->world_size() << ", device " << pg->device() << ", loss " << first
                << " -> " << last << ", w " << net->weight.item<double>() << ", b " << net->bias.item<double>()
                << std::endl;
    return 0;
  });
}
