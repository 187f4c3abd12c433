#include "ddp/fashion/fashion_options.h"

#include "ddp/fashion/fashion_mnist.h"

namespace ddp::fashion {

ddp::loop::ProgramOptions fashion_program_options() {
  ddp::loop::ProgramOptions p;
  p.defaults.program = "ddp-train";
  p.defaults.data_dir = kDefaultDataDir;
  return p;
}

std::string fashion_usage() {
  return R"(usage: ddp-launch --nproc_per_node=N ddp-train [options]

Trains a small CNN on Fashion-MNIST with distributed data parallelism (one
process per rank; rank, world size and rendezvous come from the torchrun
environment; without one it trains as a single process). Rank 0 prints
progress, writes checkpoints and metrics.jsonl.

options:
  --data_dir DIR        Fashion-MNIST *-ubyte.gz files
                        (default /usr/share/datasets/fashion-mnist)
)" + ddp::loop::loop_options_usage(fashion_program_options().defaults);
}

}  // namespace ddp::fashion
