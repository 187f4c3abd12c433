#include "ddp/worker/collectives.h"

#include <ATen/ATen.h>

namespace ddp::worker {
namespace {

double reduce_scalar(ProcessGroup& pg, double value, ReduceOp op) {
  // float64 so that sums of losses/counts lose nothing before the division.
  at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kDouble).device(pg.device()));
  pg.allreduce(t, op);
  return t.cpu().item<double>();
}

}  // namespace

double reduce_mean(ProcessGroup& pg, double value) { return reduce_scalar(pg, value, ReduceOp::Mean); }
double reduce_sum(ProcessGroup& pg, double value) { return reduce_scalar(pg, value, ReduceOp::Sum); }

at::Tensor reduce_mean(ProcessGroup& pg, const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().clone();
  pg.allreduce(t, ReduceOp::Mean);
  return t;
}

at::Tensor reduce_sum(ProcessGroup& pg, const at::Tensor& tensor) {
  at::Tensor t = tensor.detach().clone();
  pg.allreduce(t, ReduceOp::Sum);
  return t;
}

void reduce_mean_(ProcessGroup& pg, at::Tensor& tensor) { pg.allreduce(tensor, ReduceOp::Mean); }
void reduce_sum_(ProcessGroup& pg, at::Tensor& tensor) { pg.allreduce(tensor, ReduceOp::Sum); }

std::vector<at::Tensor> all_gather(ProcessGroup& pg, const at::Tensor& tensor) { return pg.all_gather(tensor); }
void barrier(ProcessGroup& pg) { pg.barrier(); }

}  // namespace ddp::worker
