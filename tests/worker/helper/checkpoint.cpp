// The helper's checkpoint mode: saves forever, for a test that kills it
// mid-save.
#include <torch/torch.h>

#include <iostream>
#include <string>

#include "ddp/worker/checkpoint.h"
#include "helper.h"

using namespace ddp::worker;

namespace worker_helper {

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

}  // namespace worker_helper
