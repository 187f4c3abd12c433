#include "ddp/text/text_main.h"

#include <optional>

#include "ddp/loop/program_setup.h"
#include "ddp/text/prepare.h"
#include "ddp/text/text_options.h"
#include "ddp/text/text_task.h"

namespace ddp::text {

int text_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks) {
  using ddp::loop::TrainOptions;
  TextOptions own;  // filled by run_program's parse
  std::optional<TextData> data;
  std::optional<TextTask> task;
  ddp::loop::ProgramSpec spec;
  spec.options = text_program_options(own);
  spec.usage = text_usage();
  spec.identity = [&] { return own.identity(); };
  // Once, on rank 0: WordNet -> the prepared CSVs, when not up to date.
  spec.prepare_data = [&](const TrainOptions& opts, std::ostream& out) {
    ensure_prepared(own.prepare(opts.data_dir), out);
    return !own.prepare_only;
  };
  spec.setup = [&](const TrainOptions& opts) -> ddp::loop::TrainingTask& {
    data.emplace(load_text_data(opts.data_dir, own.max_length));
    TextCnnOptions model;
    model.embedding_dim = own.embedding_dim;
    model.num_filters = own.num_filters;
    model.dropout = own.dropout;
    model.with_unused = own.model == "textcnn_unused";
    return task.emplace(*data, model);
  };
  return ddp::loop::run_program(argc, argv, spec, hooks);
}

}  // namespace ddp::text
