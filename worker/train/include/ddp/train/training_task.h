#pragma once
// What a training program gives the shared training loop (trainer.h): its
// data and its model, nothing else. The loop owns everything the seeds' DDP
// script does around them: the DistributedSampler with set_epoch, the DDP
// wrapper, Adam, the loss (cross-entropy, mean over the batch), the
// non-finite-loss stop, evaluation sharded over the ranks, F1 and the
// confusion counts, ReduceLROnPlateau, best-score tracking, checkpoints,
// resume, metrics.jsonl and progress. ddp-train (fashion_task.h) and
// ddp-text (worker/text) are the two implementations; docs/worker-runtime.md
// ("writing your own training program") walks through one.
//
// A task indexes its samples 0..train_size()-1 and 0..test_size()-1 and
// keeps them on the CPU; the loop asks for one batch at a time and the task
// returns it on the given device. All calls come from one thread.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ddp/worker/ddp.h"

namespace torch::nn {
class Module;
}

namespace ddp::train {

// A batch's logits [n, num_classes()] (float, on the device) and its labels
// (long [n], on the device).
struct TaskOutput {
  at::Tensor logits;
  at::Tensor labels;
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  // Builds the model. The loop seeds LibTorch's generator first, so every
  // rank (and every world size) starts from the same weights. Called once.
  virtual std::shared_ptr<torch::nn::Module> make_model() = 0;

  virtual std::int64_t train_size() const = 0;
  virtual std::int64_t test_size() const = 0;
  virtual int num_classes() const = 0;

  // The model's forward on the training samples `index` (long [n], CPU),
  // in training mode. The loop has called DDP's prepare_forward(), so the
  // backward of a loss computed from these logits is reduced.
  virtual TaskOutput forward_train(const at::Tensor& index, c10::Device device) = 0;
  // The forward on test samples [begin, end), in eval mode under no_grad.
  virtual TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device device) = 0;

  // DDP's options for this model (find_unused_parameters for the text
  // model, as the seeds wrap theirs).
  virtual ddp::worker::DDPOptions ddp_options() const { return {}; }
  // Only full batches, as a DataLoader with drop_last=True.
  virtual bool drop_last() const { return false; }
  // Test samples per forward_test call. 250 keeps ddp-train's largest
  // activation (conv1's output, 250x32x28x28 floats = 25 MiB) below the
  // runtime's mmap threshold (malloc_tuning.h), so evaluation reuses heap
  // memory instead of mapping and faulting in ~100 MiB per batch.
  virtual std::int64_t eval_batch() const { return 250; }
  // One phrase for the start line ("Fashion-MNIST 60000 train / 10000 test").
  virtual std::string describe() const = 0;
};

}  // namespace ddp::train
