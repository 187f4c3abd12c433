#include "ddp/text/text_main.h"

#include <iostream>
#include <unistd.h>

#include "ddp/loop/program_setup.h"
#include "ddp/text/prepare.h"
#include "ddp/text/text_options.h"
#include "ddp/text/text_task.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/process_group.h"

namespace ddp::text {

int text_main(int argc, char** argv, const ddp::loop::LoopHooks& hooks) {
  TextOptions opts;
  try {
    opts = parse_text_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const ddp::loop::UsageError& e) {
    std::cerr << "ddp-text: error: " << e.what() << " (see ddp-text --help)" << std::endl;
    return 2;
  }
  if (opts.train.help) {
    std::cout << text_usage();
    return 0;
  }

  auto pg = ddp::loop::join_process_group(opts.train, argc, argv, std::cout);
  // Rank 0 prepares (the others would race on the same files) and every
  // rank learns whether it worked; then each loads the files.
  ddp::worker::rank0_decides(*pg, [&] {
    ensure_prepared(opts.prepare(), std::cout);
    return std::string();
  });
  if (opts.prepare_only) return 0;
  const TextData data = load_text_data(opts.train.data_dir, opts.max_length);
  ddp::loop::configure_threads(opts.train, pg->local_world_size());

  TextCnnOptions model;
  model.embedding_dim = opts.embedding_dim;
  model.num_filters = opts.num_filters;
  model.dropout = opts.dropout;
  model.with_unused = opts.model == "textcnn_unused";
  TextTask task(data, model);
  ddp::loop::run_training(opts.train, pg, task, std::cout, pg->rank() == 0 && ::isatty(STDOUT_FILENO), hooks);
  return 0;
}

}  // namespace ddp::text
