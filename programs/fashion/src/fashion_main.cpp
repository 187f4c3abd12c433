#include "ddp/fashion/fashion_main.h"

#include <optional>

#include "ddp/fashion/fashion_options.h"
#include "ddp/fashion/fashion_task.h"
#include "ddp/loop/program_setup.h"

namespace ddp::fashion {

int fashion_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks) {
  std::optional<FashionMnist> data;
  std::optional<FashionTask> task;
  ddp::loop::ProgramSpec spec;
  spec.options = fashion_program_options();
  spec.usage = fashion_usage();
  spec.setup = [&](const ddp::loop::TrainOptions& opts) -> ddp::loop::TrainingTask& {
    data.emplace(load_fashion_mnist(opts.data_dir));
    return task.emplace(*data);
  };
  return ddp::loop::run_program(argc, argv, spec, hooks);
}

}  // namespace ddp::fashion
