#include "evaluation.h"

#include <torch/torch.h>

#include <stdexcept>
#include <vector>

#include "ddp/loop/eval_shard.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/process_group.h"

namespace ddp::loop {

Evaluation evaluate(TrainingTask& task, torch::nn::Module& model, ddp::worker::ProcessGroup& pg) {
  const c10::Device device = pg.device();
  const std::int64_t k = task.eval_sums_size();
  torch::NoGradGuard no_grad;
  model.eval();
  const Shard shard = contiguous_shard(static_cast<std::size_t>(task.test_size()),
                                       static_cast<std::size_t>(pg.world_size()),
                                       static_cast<std::size_t>(pg.rank()));
  // sums[0]: loss sum, sums[1]: samples, sums[2..]: the task's. Doubles
  // hold counts exactly far beyond any test set and let one all-reduce
  // carry everything.
  auto sums = torch::zeros({k + 2}, torch::TensorOptions(torch::kDouble).device(device));
  auto task_sums = sums.narrow(0, 2, k);
  const std::int64_t batch = task.eval_batch();
  for (auto begin = static_cast<std::int64_t>(shard.begin); begin < static_cast<std::int64_t>(shard.end);
       begin += batch) {
    const auto end = std::min<std::int64_t>(begin + batch, static_cast<std::int64_t>(shard.end));
    const TaskOutput out = task.forward_test(begin, end, device);
    sums[0] += task.loss(out, LossReduction::Sum).to(torch::kDouble);
    sums[1] += static_cast<double>(end - begin);
    task.add_eval_sums(out, task_sums);
  }
  model.train();
  ddp::worker::reduce_sum_(pg, sums);

  const at::Tensor host = sums.cpu();
  auto acc = host.accessor<double, 1>();
  Evaluation e;
  e.samples = static_cast<std::int64_t>(acc[1]);
  e.loss = e.samples > 0 ? acc[0] / acc[1] : 0.0;
  std::vector<double> totals(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i) totals[static_cast<std::size_t>(i)] = acc[i + 2];
  e.metrics = task.eval_metrics(totals);
  return e;
}

double metric_value(const Evaluation& e, const std::string& metric) {
  if (metric == "test_loss") return e.loss;
  std::string known = "test_loss";
  for (const auto& [name, value] : e.metrics) {
    if (name == metric) return value;
    known += ", " + name;
  }
  throw std::logic_error("the task monitors or tracks the metric '" + metric + "', which its evaluation does not "
                         "report (it reports " + known + ")");
}

}  // namespace ddp::loop
