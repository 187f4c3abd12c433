#pragma once
// What a training program gives the loop (trainer.h): its data and its
// model, and whatever differs from the defaults. The loop owns everything
// the seeds' DDP script does around them: the DistributedSampler with
// set_epoch, the DDP wrapper, the optimizer's steps, the non-finite-loss
// stop, gradient accumulation and clipping, evaluation sharded over the
// ranks, the learning-rate schedule, best-score tracking, checkpoints (with
// the task's own state: save_state), resume, metrics.jsonl and progress.
//
// The defaults are a classifier's, the seeds' own: cross-entropy of logits
// against class indices, Adam, accuracy / macro-F1 / micro-F1 from the
// confusion counts, the plateau schedule and the best checkpoint on
// macro-F1 (higher is better), the best micro-F1 tracked too. A regression
// task overrides loss(), the evaluation sums and metrics, and monitor()
// ("lower is better" for a loss); examples/regression is one, and
// docs/worker-runtime.md ("Writing your own training program") walks through
// it. programs/fashion and programs/text are classifiers on the defaults.
//
// A task indexes its samples 0..train_size()-1 and 0..test_size()-1 and
// keeps them on the CPU; the loop asks for one batch at a time and the task
// returns it on the given device. All calls come from one thread, but for
// forward_train_replica (below).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/loop/lr_schedule.h"
#include "ddp/loop/train_state.h"
#include "ddp/worker/ddp.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace ddp::loop {

// One batch's model output (on the device) and what it is compared with
// (on the device). For the default classifier: logits [n, num_classes()]
// and class indices (long [n]).
struct TaskOutput {
  at::Tensor prediction;
  at::Tensor target;
};

enum class LossReduction { Mean, Sum };

// Named values of one evaluation, in the order the epoch line and
// metrics.jsonl show them.
using Metrics = std::vector<std::pair<std::string, double>>;

// A metric the loop acts on: by name (test_loss, or one of the task's
// eval_metrics()) and its direction.
struct Monitor {
  std::string metric;
  bool higher_is_better = true;
};

class TrainingTask {
 public:
  virtual ~TrainingTask() = default;

  // Builds the model. The loop seeds LibTorch's generator first, so every
  // rank (and every world size) starts from the same weights. Called once,
  // before make_replica().
  virtual std::shared_ptr<torch::nn::Module> make_model() = 0;

  virtual std::int64_t train_size() const = 0;
  virtual std::int64_t test_size() const = 0;

  // The model's forward on the training samples `index` (long [n], CPU),
  // in training mode. The loop has called DDP's prepare_forward(), so the
  // backward of a loss computed from this output is reduced.
  virtual TaskOutput forward_train(const at::Tensor& index, c10::Device device) = 0;
  // The forward on test samples [begin, end), in eval mode under no_grad.
  virtual TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device device) = 0;

  // One phrase for the start line ("Fashion-MNIST 60000 train / 10000 test").
  virtual std::string describe() const = 0;

  // The loss of a batch (a scalar): its mean for training, its sum for the
  // test loss. Default: cross-entropy of logits against class indices.
  virtual at::Tensor loss(const TaskOutput& out, LossReduction reduction);

  // Optional, for a world of one process with two or more threads: a second
  // model built as make_model()'s (the loop makes its parameters share the
  // first's, so it needs no weights of its own), and the forward of
  // forward_train on it. The loop then splits each batch in two halves and
  // runs them at once, the first half's forward and backward on the model,
  // the second's on this one in a thread of the loop's, each with half the
  // threads, and adds the gradients ("A batch in two halves" in
  // docs/worker-runtime.md). forward_train_replica runs while
  // forward_train does: it may read the task's data, never change what
  // forward_train uses; loss() too is then called from both threads. A
  // model that draws random numbers in its forward (dropout) must not draw
  // them from LibTorch's default generator there (two threads, in an order
  // that changes from run to run): give the model and the replica a
  // generator each and seed them in before_halves(). Default: nullptr, and
  // the whole batch goes through forward_train.
  virtual std::shared_ptr<torch::nn::Module> make_replica() { return nullptr; }
  virtual TaskOutput forward_train_replica(const at::Tensor& index, c10::Device device);
  // Called on the loop's thread before each batch it splits, before either
  // half's forward. Seeds drawn here from LibTorch's default generator keep
  // a run reproducible, and a resume (the checkpoint carries that
  // generator's state) replays them. Default: nothing.
  virtual void before_halves() {}

  // The optimizer over the model's parameters with learning rate `lr`.
  // Default: Adam (FusedAdam: Adam's steps in one pass over memory). The
  // schedule (make_schedule) changes the rate of every parameter group.
  virtual std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& parameters,
                                                                  double lr);

  // The learning-rate schedule (lr_schedule.h). Default: the one
  // --lr_schedule names (plateau on monitor(), or warm-up and cosine).
  virtual std::unique_ptr<LrSchedule> make_schedule(const ScheduleContext& ctx) {
    return make_schedule_from_options(ctx);
  }

  // The task's own state in every checkpoint (a vocabulary, a position in a
  // stream), under keys of its own (stored as "task.<key>"). save_state is
  // called on every rank before each checkpoint; load_state on every rank
  // when the run resumes, before training, with what the checkpoint holds
  // (empty when it holds none: an older checkpoint). Default: none.
  virtual void save_state(TaskState& state) const { (void)state; }
  virtual void load_state(const TaskState& state) { (void)state; }
  // Older checkpoint keys of tracked metrics' best epochs, which the loop
  // keeps writing and reading for this task (the others get
  // "train.best.<metric>*"). Default, the classifier's: macro_f1 and
  // micro_f1 under "train.best_macro_f1", "train.best_macro_epoch", ...,
  // as the seeds' checkpoints and their Python readers have them.
  virtual LegacyBestKeys best_keys() const;

  // Evaluation. Every rank adds each of its test batches into a tensor of
  // eval_sums_size() doubles (on the device); the loop sums it over the
  // ranks with one all-reduce, so every test sample counts once, and turns
  // the totals into metrics with eval_metrics(). The loop itself adds the
  // test loss (loss(..., Sum)) and counts the samples. Default: the
  // confusion counts (num_classes()^2), giving accuracy, macro_f1, micro_f1.
  virtual std::int64_t eval_sums_size() const;
  virtual void add_eval_sums(const TaskOutput& out, at::Tensor& sums);
  virtual Metrics eval_metrics(const std::vector<double>& sums) const;
  // The classes of the default loss and metrics (0: the task overrides them).
  virtual int num_classes() const { return 0; }

  // The metric that drives ReduceLROnPlateau and the best checkpoint.
  // Default: macro_f1, higher is better.
  virtual Monitor monitor() const { return {"macro_f1", true}; }
  // The metrics whose best epoch is kept in the checkpoints and printed at
  // the end ("best macro f1: 0.8812 in epoch: 3, saved in: ..."), monitor()
  // first. Default: macro_f1 and micro_f1, as the seeds print.
  virtual std::vector<Monitor> tracked() const { return {monitor(), {"micro_f1", true}}; }

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
};

}  // namespace ddp::loop
