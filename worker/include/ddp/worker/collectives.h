#pragma once
// Small collective helpers for training loops (the seeds' reduce_mean,
// all_gather, barrier, is_main_process). Thin wrappers over ProcessGroup; they
// own nothing and never change the tensors they are given unless the name ends
// in an underscore.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/worker/process_group.h"

namespace ddp::worker {

// Scalars: every rank gets the mean / sum of the values of all ranks.
double reduce_mean(ProcessGroup& pg, double value);
double reduce_sum(ProcessGroup& pg, double value);

// Tensors: returns a new tensor (on the input's device) with the mean / sum
// across ranks; the input is unchanged.
at::Tensor reduce_mean(ProcessGroup& pg, const at::Tensor& tensor);
at::Tensor reduce_sum(ProcessGroup& pg, const at::Tensor& tensor);
// In place.
void reduce_mean_(ProcessGroup& pg, at::Tensor& tensor);
void reduce_sum_(ProcessGroup& pg, at::Tensor& tensor);

// One tensor per rank, in rank order; every rank must pass the same shape.
std::vector<at::Tensor> all_gather(ProcessGroup& pg, const at::Tensor& tensor);
void barrier(ProcessGroup& pg);
inline bool is_main_process(const ProcessGroup& pg) { return pg.rank() == 0; }

// Rank 0 decides, everyone follows: runs `decide` on rank 0 only and
// broadcasts its outcome, so every rank returns the same value, or every
// rank throws when rank 0's `decide` threw (rank 0 rethrows its own
// exception; the others throw PeerFailure(0, same message), peer_failure.h).
// For choices only one rank may make (which checkpoint to resume, whether a
// directory could be created): no rank is left waiting in a collective for
// a rank 0 that failed. Collective: every rank must call it.
std::string rank0_decides(ProcessGroup& pg, const std::function<std::string()>& decide);
std::int64_t rank0_decides_int(ProcessGroup& pg, const std::function<std::int64_t()>& decide);

// The same taking the shared_ptr init_process_group returns.
using PG = std::shared_ptr<ProcessGroup>;
inline double reduce_mean(const PG& pg, double v) { return reduce_mean(*pg, v); }
inline double reduce_sum(const PG& pg, double v) { return reduce_sum(*pg, v); }
inline at::Tensor reduce_mean(const PG& pg, const at::Tensor& t) { return reduce_mean(*pg, t); }
inline at::Tensor reduce_sum(const PG& pg, const at::Tensor& t) { return reduce_sum(*pg, t); }
inline void reduce_mean_(const PG& pg, at::Tensor& t) { reduce_mean_(*pg, t); }
inline void reduce_sum_(const PG& pg, at::Tensor& t) { reduce_sum_(*pg, t); }
inline std::vector<at::Tensor> all_gather(const PG& pg, const at::Tensor& t) { return all_gather(*pg, t); }
inline void barrier(const PG& pg) { barrier(*pg); }
inline bool is_main_process(const PG& pg) { return is_main_process(*pg); }

}  // namespace ddp::worker
