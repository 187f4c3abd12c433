// ddp-text: the seeds' own program, a DDP text classifier. Reads its
// options, joins the process group (or runs as a single process), lets rank
// 0 prepare the WordNet data when it is not up to date (prepare.h), loads it
// on every rank and trains TextCnn with the shared loop (trainer.h) on
// TextTask. Exit codes as ddp-train: 0 done, 2 usage error, 1 other errors.
//   ddp-launch --nproc_per_node=2 build/bin/ddp-text [options]
#include <iostream>
#include <unistd.h>

#include "ddp/text/prepare.h"
#include "ddp/text/text_options.h"
#include "ddp/text/text_task.h"
#include "ddp/train/program_setup.h"
#include "ddp/train/trainer.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/run_main.h"

namespace {

using namespace ddp::text;

int text_main(int argc, char** argv) {
  TextOptions opts;
  try {
    opts = parse_text_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const ddp::train::UsageError& e) {
    std::cerr << "ddp-text: error: " << e.what() << " (see ddp-text --help)" << std::endl;
    return 2;
  }
  if (opts.train.help) {
    std::cout << text_usage();
    return 0;
  }

  auto pg = ddp::train::join_process_group(opts.train, argc, argv, std::cout);
  // Rank 0 prepares (the others would race on the same files) and every
  // rank learns whether it worked; then each loads the files.
  ddp::worker::rank0_decides(*pg, [&] {
    ensure_prepared(opts.prepare(), std::cout);
    return std::string();
  });
  if (opts.prepare_only) return 0;
  const TextData data = load_text_data(opts.train.data_dir, opts.max_length);
  ddp::train::configure_threads(opts.train, pg->local_world_size());

  TextCnnOptions model;
  model.embedding_dim = opts.embedding_dim;
  model.num_filters = opts.num_filters;
  model.dropout = opts.dropout;
  model.with_unused = opts.model == "textcnn_unused";
  TextTask task(data, model);
  ddp::train::run_training(opts.train, pg, task, std::cout, pg->rank() == 0 && ::isatty(STDOUT_FILENO));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddp::worker::run_main(argc, argv, text_main); }
