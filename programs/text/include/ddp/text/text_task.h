#pragma once
// ddp-text's part of the shared training loop (training_task.h): the
// prepared WordNet glosses (text_dataset.h), each batch packed
// (pack_sequences), and TextCnn. DDP with find_unused_parameters and only
// full batches, as the seeds' script.

#include <memory>

#include "ddp/text/text_cnn.h"
#include "ddp/text/text_dataset.h"
#include "ddp/loop/training_task.h"

namespace ddp::text {

class TextTask : public ddp::loop::TrainingTask {
 public:
  // `data` must outlive the task.
  TextTask(const TextData& data, const TextCnnOptions& model);

  std::shared_ptr<torch::nn::Module> make_model() override;
  std::int64_t train_size() const override { return static_cast<std::int64_t>(data_.train.size()); }
  std::int64_t test_size() const override { return static_cast<std::int64_t>(data_.test.size()); }
  int num_classes() const override { return static_cast<int>(model_options_.num_classes); }
  ddp::loop::TaskOutput forward_train(const at::Tensor& index, c10::Device device) override;
  ddp::loop::TaskOutput forward_test(std::int64_t begin, std::int64_t end, c10::Device device) override;
  // The batch halves at one process: a replica whose dropout and the
  // model's each draw from a generator of their own, seeded every batch
  // from LibTorch's default generator (before_halves).
  std::shared_ptr<torch::nn::Module> make_replica() override;
  ddp::loop::TaskOutput forward_train_replica(const at::Tensor& index, c10::Device device) override;
  void before_halves() override;
  ddp::worker::DDPOptions ddp_options() const override;
  bool drop_last() const override { return true; }
  std::string describe() const override;

 private:
  ddp::loop::TaskOutput forward(TextCnn& model, const TextSplit& split, const std::int64_t* rows,
                                 std::int64_t count, c10::Device device);

  const TextData& data_;
  TextCnnOptions model_options_;
  std::shared_ptr<TextCnn> model_;
  std::shared_ptr<TextCnn> replica_;
};

}  // namespace ddp::text
