#pragma once
// The Fashion-MNIST CNN: Conv2d(1,32,3,pad 1) -> ReLU -> MaxPool 2 ->
// Conv2d(32,64,3,pad 1) -> ReLU -> MaxPool 2 -> Flatten -> Linear(3136,128)
// -> ReLU -> Linear(128,10). Parameter names (conv1, conv2, fc1, fc2) match
// bench/train/python_ddp.py so saved weights load into either.
// forward() computes exactly this function, only faster on CPU.

#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

namespace ddp::fashion {

struct FashionCnn : torch::nn::Module {
  FashionCnn();
  // x: [N, 1, 28, 28] float; returns logits [N, 10]. Uses a direct kernel
  // for conv1, the fused relu_max_pool2x2 and oneDNN for the Linear layers
  // (see model.cpp).
  torch::Tensor forward(const torch::Tensor& x);
  // The same function written with stock layers, as Python's model is;
  // tests check that forward() agrees with it.
  torch::Tensor reference_forward(const torch::Tensor& x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

}  // namespace ddp::fashion
