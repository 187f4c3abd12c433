#pragma once
// The training loop's options (trainer.h), shared by every program on it,
// filled once from the command line and the environment; nothing else in
// the loop reads argv or getenv. A program adds its own options and
// defaults through ProgramOptions. Parsing is
// strict: a bad value throws UsageError with one line naming the option and
// the value, which main prints before exiting with status 2.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::loop {

class UsageError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct TrainOptions {
  std::string program = "training";  // the program's name, in messages and the start line
  int epochs = 2;
  int batch_size = 64;            // per process, as in the seeds
  double learning_rate = 1e-3;    // Adam
  std::uint64_t seed = 42;        // model init and sampler shuffling
  std::string data_dir;           // default: the program's (ProgramOptions); "" = none
  std::string checkpoint_dir = "checkpoints";
  bool resume = false;
  std::int64_t checkpoint_every_steps = 0;  // a mid-epoch checkpoint every N global steps; 0 = epochs only
  std::int64_t max_steps = 0;     // optimizer steps per epoch; 0 = whole epoch (--max_steps_per_epoch, alias --max_steps)
  std::int64_t total_steps = 0;   // optimizer steps of the whole run, over its epochs; 0 = no limit
  int accumulate_batches = 1;     // batches per optimizer step (DDP's no_sync on all but the last)
  double grad_clip_norm = 0;      // clip the averaged gradients' global L2 norm to this; 0 = off
  std::int64_t eval_every_steps = 0;  // also evaluate every N global steps, mid-epoch; 0 = per epoch only
  std::string lr_schedule = "plateau";  // plateau | cosine (lr_schedule.h)
  std::int64_t warmup_steps = 0;  // cosine: linear warm-up steps
  bool no_shuffle = false;
  std::string save_final;         // "" = do not write
  int log_interval = 50;          // steps between progress lines (non-TTY)
  double lr_factor = 0.1;         // ReduceLROnPlateau
  int lr_patience = 10;
  int num_threads = 0;            // intra-op threads; 0 = cores / local world size
  bool split_batch = true;        // 1 process, 2+ threads: each batch in two halves at once (batch_halves.h)
  std::string device = "auto";    // cpu | cuda | auto (ddp::worker::InitOptions::device)
  std::optional<int> local_rank;  // --local_rank=N from legacy launchers
  bool help = false;
  // The program's own options that decide a run's trajectory, as
  // name -> value text; part of the run identity (run_identity.h).
  std::map<std::string, std::string> program_identity;

  // From the environment.
  int restart_count = 0;          // TORCHELASTIC_RESTART_COUNT
  // launch_directory(TORCHELASTIC_ERROR_FILE): the same across the restarts
  // of one launch, another for each launch; "" when unknown (run_identity.h).
  std::string launch_dir;
  bool omp_threads_set = false;   // OMP_NUM_THREADS is set: keep LibTorch's choice

  // Resume from the last checkpoint: asked for, or restarted by the launcher.
  bool should_resume() const { return resume || restart_count > 0; }
};

using EnvLookup = std::function<std::optional<std::string>(const char*)>;

// A program's additions to the shared options: its name, its defaults
// (`defaults` starts every parse, so a program may set data_dir, epochs,
// ...), and options of its own, each given to `apply` (canonical name
// without "--", value; "" for a flag), which throws UsageError on a bad
// value.
struct ProgramOptions {
  TrainOptions defaults;
  std::map<std::string, bool> extra;  // name -> takes a value
  std::function<void(const std::string& name, const std::string& value)> apply;
};

// args excludes argv[0]. `env` defaults to the process environment.
TrainOptions parse_train_options(const std::vector<std::string>& args, const EnvLookup& env = {},
                                 const ProgramOptions& program = ProgramOptions());

// The shared options' lines of --help ("  --epochs N ..."), for a program's
// usage text; `defaults` supplies the defaults shown.
std::string loop_options_usage(const TrainOptions& defaults);

// Strict number parsers for a program's own options: one-line UsageError
// naming `what` and the value.
long long parse_int_option(const std::string& text, const std::string& what, long long lo, long long hi);
double parse_fraction_option(const std::string& text, const std::string& what);  // 0 <= value < 1

}  // namespace ddp::loop
