#include "ddp/worker/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>
#include <string>

namespace ddp::worker {

DistributedSampler::DistributedSampler(size_t dataset_size, size_t num_replicas, size_t rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), shuffle_(shuffle),
      seed_(seed), drop_last_(drop_last) {
  if (num_replicas == 0) throw std::invalid_argument("DistributedSampler: num_replicas must be >= 1");
  if (rank >= num_replicas)
    throw std::invalid_argument("DistributedSampler: invalid rank " + std::to_string(rank) +
                                ", rank should be in the interval [0, " + std::to_string(num_replicas - 1) + "]");
  // Python: ceil((N - R) / R) when dropping an uneven tail, else ceil(N / R).
  // For 0 < N < R the first is ceil of a negative fraction, i.e. 0.
  const size_t n = dataset_size, r = num_replicas;
  if (drop_last && n % r != 0)
    num_samples_ = n < r ? 0 : (n - r + r - 1) / r;
  else
    num_samples_ = (n + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  all.reserve(dataset_size_);
  if (shuffle_) {
    // torch.Generator().manual_seed(seed + epoch) then torch.randperm(n, generator=g).
    auto gen = at::detail::createCPUGenerator(seed_ + epoch_);
    at::Tensor perm = at::randperm(static_cast<int64_t>(dataset_size_), gen, at::TensorOptions().dtype(at::kLong));
    const int64_t* p = perm.data_ptr<int64_t>();
    all.assign(p, p + perm.numel());
  } else {
    for (size_t i = 0; i < dataset_size_; ++i) all.push_back(static_cast<int64_t>(i));
  }
  const size_t total = total_size();
  if (!drop_last_) {
    // Pad by repeating the list from its start, as often as needed.
    const size_t n = all.size();
    for (size_t i = 0; n > 0 && all.size() < total; ++i) all.push_back(all[i % n]);
  } else {
    all.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  for (size_t i = rank_; i < total; i += num_replicas_) mine.push_back(all[i]);
  return mine;
}

}  // namespace ddp::worker
