#pragma once
// ddp-train's options, filled once from the command line and the
// environment; nothing else in ddp-train reads argv or getenv. Parsing is
// strict: a bad value throws UsageError with one line naming the option and
// the value, which main prints before exiting with status 2.

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::train {

class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct TrainOptions {
  int epochs = 2;
  int batch_size = 64;            // per process, as in the seeds
  double learning_rate = 1e-3;    // Adam
  std::uint64_t seed = 42;        // model init and sampler shuffling
  std::string data_dir;           // default: kDefaultDataDir
  std::string checkpoint_dir = "checkpoints";
  bool resume = false;
  std::int64_t max_steps = 0;     // optimizer steps per epoch; 0 = whole epoch
  bool no_shuffle = false;
  std::string save_final;         // "" = do not write
  int log_interval = 50;          // steps between progress lines (non-TTY)
  double lr_factor = 0.1;         // ReduceLROnPlateau
  int lr_patience = 10;
  int num_threads = 0;            // intra-op threads; 0 = cores / local world size
  std::string device = "auto";    // cpu | cuda | auto (ddp::worker::InitOptions::device)
  std::optional<int> local_rank;  // --local_rank=N from legacy launchers
  bool help = false;

  // From the environment.
  int restart_count = 0;          // TORCHELASTIC_RESTART_COUNT
  // launch_directory(TORCHELASTIC_ERROR_FILE): the same across the restarts
  // of one launch, another for each launch; "" when unknown (run_identity.h).
  std::string launch_dir;
  bool omp_threads_set = false;   // OMP_NUM_THREADS is set: keep LibTorch's choice
  // Test hook DDP_TRAIN_TEST_DIE_AT="RANK:STEP": that rank kills itself with
  // SIGKILL before global step STEP, on the first attempt only, so tests can
  // exercise restart + resume. -1 = off.
  int die_rank = -1;
  std::int64_t die_step = -1;

  // Resume from the last checkpoint: asked for, or restarted by the launcher.
  bool should_resume() const { return resume || restart_count > 0; }
};

using EnvLookup = std::function<std::optional<std::string>(const char*)>;

// args excludes argv[0]. `env` defaults to the process environment.
TrainOptions parse_train_options(const std::vector<std::string>& args,
                                 const EnvLookup& env = {});

// The --help text.
std::string train_usage();

}  // namespace ddp::train
