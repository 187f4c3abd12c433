#pragma once
// run_program: the whole main of a training program on the loop. A program
// describes itself in a ProgramSpec (its options, its --help, its data and
// task) and calls run_program, which parses the command line (the loop's
// options and the program's), prints --help, joins the process group (or
// runs as a single process), lets rank 0 prepare the data while the others
// wait, loads the data on every rank and trains (run_training). The split is
// Lightning's: prepare_data on rank 0 (files every rank then reads), setup
// on every rank (load, build the task). ddp-train, ddp-text and
// examples/regression are written on it. It never catches the program's
// errors: ddp::worker::run_main, around it, turns them into exit 1.

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "ddp/loop/train_options.h"
#include "ddp/loop/trainer.h"
#include "ddp/loop/training_task.h"

namespace ddp::worker {
class ProcessGroup;
}

namespace ddp::loop {

struct ProgramSpec {
  // The program's name (options.defaults.program, in its messages), its
  // defaults and its own options (train_options.h).
  ProgramOptions options;
  // The whole --help text; a program ends it with loop_options_usage(its defaults).
  std::string usage;
  // Optional, after parsing: the program's own options that decide a run's
  // trajectory, name -> value, for the run identity (run_identity.h).
  std::function<std::map<std::string, std::string>()> identity;
  // Optional, rank 0 only, after the join and before any rank runs setup:
  // work done once for every rank (files they then read). Returns whether to
  // go on and train; false when the preparation was the whole job (ddp-text
  // --prepare_only), and every rank then exits 0. When it throws, every rank
  // fails with its message (the others as a PeerFailure).
  std::function<bool(const TrainOptions& opts, std::ostream& out)> prepare_data;
  // Every rank: loads the data and returns the task to train. The task (and
  // the data it reads) must outlive run_program: keep them in main. Without
  // prepare_data it runs before the join, so a missing data set is reported
  // before any rendezvous wait; on a rank brought back by an in-place
  // recovery it runs on a thread of its own while the join goes on.
  std::function<TrainingTask&(const TrainOptions& opts)> setup;
};

// Where run_program runs: a program's own process by default (std::cout,
// std::cerr, the torchrun environment); the in-process tests give each
// rank thread its streams and process group.
struct ProgramContext {
  std::ostream* out = nullptr;  // progress, --help; null = std::cout
  std::ostream* err = nullptr;  // the usage error's line; null = std::cerr
  // Joins the process group; empty = from the torchrun environment, or a
  // single process without one (saying so on `out`).
  std::function<std::shared_ptr<ddp::worker::ProcessGroup>(const TrainOptions& opts)> join;
};

// A program's main (inside ddp::worker::run_main). Exit codes: 0 done
// (--help, or prepare_data said stop), 2 usage error: one line naming the
// option, "<program>: error: ... (see <program> --help)". Other errors
// throw. `hooks` go to run_training.
int run_program(int argc, char** argv, const ProgramSpec& spec, const LoopHooks& hooks = {},
                const ProgramContext& context = {});

}  // namespace ddp::loop
