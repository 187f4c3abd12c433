// TrainingTask's defaults: a classifier's loss, optimizer and metrics.
#include "ddp/loop/training_task.h"

#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "ddp/loop/confusion_matrix.h"
#include "ddp/worker/fused_adam.h"

namespace ddp::loop {
namespace {

int classes_of(const TrainingTask& task) {
  const int n = task.num_classes();
  if (n < 1)
    throw std::logic_error("a TrainingTask on the default classifier loss and metrics must return its number of "
                           "classes from num_classes(), or override loss() and the evaluation sums and metrics");
  return n;
}

}  // namespace

TaskOutput TrainingTask::forward_train_replica(const at::Tensor&, c10::Device) {
  throw std::logic_error("a TrainingTask whose make_replica() returns a model must override forward_train_replica()");
}

at::Tensor TrainingTask::loss(const TaskOutput& out, LossReduction reduction) {
  namespace F = torch::nn::functional;
  if (reduction == LossReduction::Sum)
    return F::cross_entropy(out.prediction, out.target, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  return F::cross_entropy(out.prediction, out.target);
}

std::unique_ptr<torch::optim::Optimizer> TrainingTask::make_optimizer(const std::vector<at::Tensor>& parameters,
                                                                      double lr) {
  return std::make_unique<ddp::worker::FusedAdam>(parameters, torch::optim::AdamOptions(lr));
}

LegacyBestKeys TrainingTask::best_keys() const {
  LegacyBestKeys keys;
  for (const std::string which : {"macro", "micro"})
    keys[which + "_f1"] = {"train.best_" + which + "_f1", "train.best_" + which + "_epoch",
                           "train.best_" + which + "_checkpoint"};
  return keys;
}

std::int64_t TrainingTask::eval_sums_size() const {
  const std::int64_t n = classes_of(*this);
  return n * n;
}

// The confusion counts, target-major; doubles hold counts exactly far beyond
// any test set.
void TrainingTask::add_eval_sums(const TaskOutput& out, at::Tensor& sums) {
  const std::int64_t n = classes_of(*this);
  const auto cell = out.target * n + out.prediction.argmax(1);
  sums.add_(torch::bincount(cell, {}, n * n).to(torch::kDouble));
}

Metrics TrainingTask::eval_metrics(const std::vector<double>& sums) const {
  const int n = classes_of(*this);
  std::vector<std::int64_t> counts(sums.size());
  for (std::size_t i = 0; i < sums.size(); ++i) counts[i] = std::llround(sums[i]);
  const ConfusionMatrix m = ConfusionMatrix::from_counts(n, counts);
  return {{"accuracy", m.accuracy()}, {"macro_f1", m.macro_f1()}, {"micro_f1", m.micro_f1()}};
}

}  // namespace ddp::loop
