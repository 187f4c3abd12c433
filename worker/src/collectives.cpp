#include "ddp/worker/collectives.h"

#include "ddp/worker/peer_failure.h"

#include <ATen/ATen.h>

#include <cstring>
#include <exception>
#include <stdexcept>

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

std::string rank0_decides(ProcessGroup& pg, const std::function<std::string()>& decide) {
  std::string payload;  // the decision, or the error message
  std::exception_ptr error;
  if (pg.rank() == 0) {
    try {
      payload = decide();
    } catch (const std::exception& e) {
      error = std::current_exception();
      payload = e.what();
    } catch (...) {
      error = std::current_exception();
      payload = "rank 0 failed with an exception not derived from std::exception";
    }
  }
  // Header {failed, length}, then the bytes: two broadcasts, one round trip each.
  auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor header = at::tensor({error ? std::int64_t{1} : 0, static_cast<std::int64_t>(payload.size())}, opts)
                          .to(pg.device());
  pg.broadcast(header, 0);
  header = header.cpu();
  const bool failed = header[0].item<std::int64_t>() != 0;
  const auto length = header[1].item<std::int64_t>();
  if (length > 0) {
    at::Tensor bytes = at::empty({length}, at::kByte);
    if (pg.rank() == 0) std::memcpy(bytes.data_ptr(), payload.data(), payload.size());
    bytes = bytes.to(pg.device());
    pg.broadcast(bytes, 0);
    bytes = bytes.cpu();
    payload.assign(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(length));
  }
  if (error) std::rethrow_exception(error);
  // Not this rank's own failure: marked, so the report names rank 0.
  if (failed) throw PeerFailure(0, payload);
  return payload;
}

std::int64_t rank0_decides_int(ProcessGroup& pg, const std::function<std::int64_t()>& decide) {
  return std::stoll(rank0_decides(pg, [&] { return std::to_string(decide()); }));
}

}  // namespace ddp::worker
