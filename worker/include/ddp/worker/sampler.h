#pragma once
// DistributedSampler: which dataset indices this rank reads in an epoch,
// identical to Python's torch.utils.data.DistributedSampler for every
// (dataset size, replicas, rank, seed, epoch, shuffle, drop_last). Pure
// computation: owns no data, never communicates. (LibTorch's own
// torch::data::samplers::DistributedRandomSampler yields different indices.)

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp::worker {

class DistributedSampler {
 public:
  // Throws std::invalid_argument when rank >= num_replicas or num_replicas == 0.
  DistributedSampler(size_t dataset_size, size_t num_replicas, size_t rank,
                     bool shuffle = true, uint64_t seed = 0, bool drop_last = false);

  // Like Python: call at the start of every epoch so shuffles differ.
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch (num_samples() of them).
  std::vector<int64_t> indices() const;
  size_t num_samples() const { return num_samples_; }
  size_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  size_t dataset_size_, num_replicas_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  uint64_t epoch_ = 0;
  size_t num_samples_;
};

}  // namespace ddp::worker
