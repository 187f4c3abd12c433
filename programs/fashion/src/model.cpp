#include "ddp/fashion/model.h"

#include <torch/torch.h>

#include "ddp/fashion/conv3x3_relu_max_pool.h"
#include "ddp/fashion/linear_as_conv.h"
#include "ddp/fashion/linear_sgemm.h"
#include "ddp/fashion/relu_max_pool.h"

namespace ddp::fashion {

namespace nn = torch::nn;

FashionCnn::FashionCnn() {
  conv1 = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)));
  conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)));
  fc1 = register_module("fc1", nn::Linear(64 * 7 * 7, 128));
  fc2 = register_module("fc2", nn::Linear(128, 10));
}

torch::Tensor FashionCnn::forward(const torch::Tensor& x) {
  // The hand-written kernels below are CPU code; elsewhere the stock
  // layers are the fast path already.
  if (!x.device().is_cpu()) return reference_forward(x);
  auto h = conv3x3_relu_max_pool2x2(x, conv1->weight, conv1->bias);
  // conv2 on channels-last memory: oneDNN's kernels then read its input,
  // write its output and take its output's gradient without reordering
  // them to and from their blocked layout (four reorders of 1.6-3.2 MB a
  // step), and relu_max_pool2x2 pools a pixel's channels at once.
  h = relu_max_pool2x2(conv2->forward(h.contiguous(at::MemoryFormat::ChannelsLast)));
  // fc1 through oneDNN's GEMM where LibTorch loaded it (linear_sgemm.h),
  // else as a convolution over its whole input (linear_as_conv.h): the same
  // products and sums, and LibTorch 1.13's own GEMM is reference BLAS. The
  // parameters keep nn.Linear's names and shapes. fc2 is a stock
  // convolution: its weight is small, and so is the work.
  h = torch::relu(onednn_sgemm_available() ? linear_sgemm(h, fc1->weight, fc1->bias)
                                           : linear_as_conv(h, fc1->weight, fc1->bias));
  return torch::conv2d(h, fc2->weight.view({10, 128, 1, 1}), fc2->bias).flatten(1);
}

torch::Tensor FashionCnn::reference_forward(const torch::Tensor& x) {
  auto h = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
  h = torch::max_pool2d(torch::relu(conv2->forward(h)), 2);
  h = torch::relu(fc1->forward(h.flatten(1)));
  return fc2->forward(h);
}

}  // namespace ddp::fashion
