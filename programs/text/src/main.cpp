// ddp-text: the seeds' own program, a DDP text classifier. Reads its
// options, joins the process group (or runs as a single process), lets rank
// 0 prepare the WordNet data when it is not up to date (prepare.h), loads it
// on every rank and trains TextCnn with the shared loop (trainer.h) on
// TextTask. Exit codes as ddp-train: 0 done, 2 usage error, 1 other errors.
//   ddp-launch --nproc_per_node=2 build/bin/ddp-text [options]
#include "ddp/text/text_main.h"
#include "ddp/worker/run_main.h"

int main(int argc, char** argv) {
  return ddp::worker::run_main(argc, argv, [](int c, char** v) { return ddp::text::text_main(c, v); });
}
