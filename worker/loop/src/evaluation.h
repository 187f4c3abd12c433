#pragma once
// One evaluation of the whole test set by every rank (trainer.h): each rank
// scores its contiguous slice, and the task's sums, the loss sum and the
// sample count are added up over the ranks with one all-reduce, so the
// totals count each test sample exactly once (DistributedSampler would pad
// with repeats). Internal to the loop library.

#include <cstdint>
#include <string>

#include "ddp/loop/training_task.h"

namespace torch::nn {
class Module;
}
namespace ddp::worker {
class ProcessGroup;
}

namespace ddp::loop {

struct Evaluation {
  double loss = 0;           // test_loss: the task's loss, mean over the counted samples
  std::int64_t samples = 0;  // test samples counted
  Metrics metrics;           // the task's eval_metrics()
};

// Collective; the model is in eval mode under no_grad meanwhile.
Evaluation evaluate(TrainingTask& task, torch::nn::Module& model, ddp::worker::ProcessGroup& pg);

// The value of `metric` ("test_loss" or one of the task's metrics); throws
// std::logic_error naming the metrics there are.
double metric_value(const Evaluation& e, const std::string& metric);

}  // namespace ddp::loop
