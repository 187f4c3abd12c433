#include "ddp/train/model.h"

#include <torch/torch.h>

namespace ddp::train {

namespace nn = torch::nn;

FashionCnn::FashionCnn() {
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)));
  conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
  fc1 = register_module("fc1", nn::Linear(64 * 7 * 7, 128));
  fc2 = register_module("fc2", nn::Linear(128, 10));
}

torch::Tensor FashionCnn::forward(const torch::Tensor& x) {
  auto h = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
  h = torch::max_pool2d(torch::relu(conv2->forward(h)), 2);
  h = torch::relu(fc1->forward(h.flatten(1)));
  return fc2->forward(h);
}

}  // namespace ddp::train
