// ddp-train: the main job. Reads its options, loads Fashion-MNIST, joins the
// process group from the torchrun environment (or runs as a single process
// when there is none) and trains FashionTask (fashion_task.h) with the loop
// library (ddp/loop/trainer.h); fashion_main.cpp is the whole program.
//   ddp-launch --nproc_per_node=2 build/bin/ddp-train [options]
// Exit codes: 0 done, 2 usage error (one line), 1 any other error (one line
// from run_main, plus the torchelastic error file for the launcher).
#include "ddp/fashion/fashion_main.h"
#include "ddp/worker/run_main.h"

int main(int argc, char** argv) {
  return ddp::worker::run_main(argc, argv, [](int c, char** v) { return ddp::fashion::fashion_main(c, v); });
}
