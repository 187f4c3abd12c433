#pragma once
// Bucket assignment: which parameters share a gradient bucket, and in which
// order the buckets are reduced. A pure function of the parameters' sizes,
// dtypes and devices (no tensors, no processes), so every rank that wraps the
// same model computes the same buckets, and tests check the rule directly.
// DistributedDataParallel calls it once at construction; the Reducer owns the
// buckets it describes.
//
// The rule is Python DDP's compute_bucket_assignment_by_size with the limits
// it uses after its first-iteration rebuild: parameters are taken in reverse
// registration order (the last layers' gradients are ready first); only
// parameters that require grad take part; each (dtype, device) group fills
// its own bucket, which closes once it holds at least its limit
// (first_bucket_bytes for a group's first bucket, bucket_bytes afterwards);
// buckets are ordered by their smallest parameter index, largest first (as
// Python sorts and then reverses), i.e. in the order they complete.

#include <cstddef>
#include <string>
#include <vector>

namespace ddp::worker {

// What the assignment needs to know about one parameter.
struct ParamSpec {
  size_t bytes = 0;
  std::string group;  // e.g. "Float@cpu": parameters of different groups never share a bucket
  bool requires_grad = true;
};

struct BucketLimits {
  size_t first_bucket_bytes = 1024 * 1024;
  size_t bucket_bytes = 25 * 1024 * 1024;
};

struct AssignedBucket {
  std::vector<size_t> params;  // indices into the ParamSpec list, in fill order
  size_t bytes = 0;
};

// Throws std::invalid_argument when a limit is 0.
std::vector<AssignedBucket> compute_bucket_assignment(const std::vector<ParamSpec>& params,
                                                      const BucketLimits& limits);

}  // namespace ddp::worker
