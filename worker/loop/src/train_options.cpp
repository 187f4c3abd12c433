#include "ddp/loop/train_options.h"

#include <map>
#include <sstream>

#include "ddp/common/parse.h"
#include "ddp/loop/run_identity.h"

namespace ddp::loop {
namespace {

double parse_positive_double(const std::string& text, const std::string& what, bool below_one) {
  const auto parsed = ddp::parse_finite_double(text);
  if (!parsed) throw UsageError(what + ": '" + text + "' is not a number");
  const double v = *parsed;
  if (v <= 0 || (below_one && v >= 1))
    throw UsageError(what + ": " + text + " is out of range, expected " +
                     (below_one ? "0 < value < 1" : "a value > 0"));
  return v;
}

// Accepts both spellings, as torchrun does: --batch_size and --batch-size.
std::string canonical(std::string name) {
  for (auto& c : name)
    if (c == '-') c = '_';
  return name;
}

}  // namespace

long long parse_int_option(const std::string& text, const std::string& what, long long lo, long long hi) {
  try {
    return ddp::parse_int(text, what, lo, hi);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

double parse_fraction_option(const std::string& text, const std::string& what) {
  const auto parsed = ddp::parse_finite_double(text);
  if (!parsed) throw UsageError(what + ": '" + text + "' is not a number");
  if (*parsed < 0 || *parsed >= 1) throw UsageError(what + ": " + text + " is out of range, expected 0 <= value < 1");
  return *parsed;
}

TrainOptions parse_train_options(const std::vector<std::string>& args, const EnvLookup& env_in,
                                 const ProgramOptions& program) {
  const EnvLookup env = env_in ? env_in : EnvLookup([](const char* n) { return ddp::get_env(n); });
  TrainOptions o = program.defaults;

  enum class Kind { Flag, Value };
  std::map<std::string, Kind> known = {
      {"epochs", Kind::Value},        {"batch_size", Kind::Value},  {"learning_rate", Kind::Value},
      {"lr", Kind::Value},            {"seed", Kind::Value},        {"data_dir", Kind::Value},
      {"checkpoint_dir", Kind::Value}, {"resume", Kind::Flag},      {"max_steps", Kind::Value},
      {"no_shuffle", Kind::Flag},     {"save_final", Kind::Value},  {"log_interval", Kind::Value},
      {"lr_factor", Kind::Value},     {"lr_patience", Kind::Value}, {"num_threads", Kind::Value},
      {"local_rank", Kind::Value},    {"help", Kind::Flag},         {"device", Kind::Value},
      {"no_split_batch", Kind::Flag}, {"checkpoint_every_steps", Kind::Value},
      {"max_steps_per_epoch", Kind::Value}, {"total_steps", Kind::Value}, {"accumulate_batches", Kind::Value},
      {"grad_clip_norm", Kind::Value}, {"eval_every_steps", Kind::Value}, {"lr_schedule", Kind::Value},
      {"warmup_steps", Kind::Value},
  };
  for (const auto& [name, takes_value] : program.extra) known[name] = takes_value ? Kind::Value : Kind::Flag;

  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h") {
      o.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2)
      throw UsageError("unexpected argument '" + arg + "'");
    std::string body = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = body.find('='); eq != std::string::npos) {
      value = body.substr(eq + 1);
      body = body.substr(0, eq);
      has_value = true;
    }
    const std::string name = canonical(body);
    const auto it = known.find(name);
    if (it == known.end()) throw UsageError("unknown option '--" + body + "'");
    const std::string what = "--" + name;
    if (it->second == Kind::Flag) {
      if (has_value) throw UsageError(what + " takes no value (got '" + value + "')");
    } else if (!has_value) {
      if (i + 1 >= args.size()) throw UsageError(what + " needs a value");
      value = args[++i];
    }

    if (program.extra.count(name)) program.apply(name, value);
    else if (name == "epochs") o.epochs = static_cast<int>(parse_int_option(value, what, 1, 1000000));
    else if (name == "batch_size") o.batch_size = static_cast<int>(parse_int_option(value, what, 1, 1 << 20));
    else if (name == "learning_rate" || name == "lr") o.learning_rate = parse_positive_double(value, what, false);
    else if (name == "seed") o.seed = static_cast<std::uint64_t>(parse_int_option(value, what, 0, (1LL << 62)));
    else if (name == "data_dir") {
      if (value.empty()) throw UsageError("--data_dir: empty path");
      o.data_dir = value;
    }
    else if (name == "checkpoint_dir") o.checkpoint_dir = value;
    else if (name == "resume") o.resume = true;
    else if (name == "checkpoint_every_steps") o.checkpoint_every_steps = parse_int_option(value, what, 0, 1LL << 40);
    else if (name == "max_steps" || name == "max_steps_per_epoch") o.max_steps = parse_int_option(value, what, 0, 1LL << 40);
    else if (name == "total_steps") o.total_steps = parse_int_option(value, what, 0, 1LL << 40);
    else if (name == "accumulate_batches")
      o.accumulate_batches = static_cast<int>(parse_int_option(value, what, 1, 1 << 20));
    else if (name == "grad_clip_norm") o.grad_clip_norm = parse_positive_double(value, what, false);
    else if (name == "eval_every_steps") o.eval_every_steps = parse_int_option(value, what, 0, 1LL << 40);
    else if (name == "warmup_steps") o.warmup_steps = parse_int_option(value, what, 0, 1LL << 40);
    else if (name == "lr_schedule") {
      if (value != "plateau" && value != "cosine")
        throw UsageError(what + ": '" + value + "' is not a schedule, use plateau or cosine");
      o.lr_schedule = value;
    }
    else if (name == "no_shuffle") o.no_shuffle = true;
    else if (name == "no_split_batch") o.split_batch = false;
    else if (name == "save_final") o.save_final = value;
    else if (name == "log_interval") o.log_interval = static_cast<int>(parse_int_option(value, what, 1, 1 << 30));
    else if (name == "lr_factor") o.lr_factor = parse_positive_double(value, what, true);
    else if (name == "lr_patience") o.lr_patience = static_cast<int>(parse_int_option(value, what, 0, 1 << 20));
    else if (name == "num_threads") o.num_threads = static_cast<int>(parse_int_option(value, what, 0, 4096));
    else if (name == "local_rank") o.local_rank = static_cast<int>(parse_int_option(value, what, 0, 1 << 20));
    else if (name == "device") {
      if (value != "cpu" && value != "cuda" && value != "auto")
        throw UsageError(what + ": '" + value + "' is not a device, use cpu, cuda or auto");
      o.device = value;
    } else if (name == "help") o.help = true;
  }
  if (o.checkpoint_dir.empty()) throw UsageError("--checkpoint_dir: empty path");
  if (o.warmup_steps > 0 && o.lr_schedule != "cosine")
    throw UsageError("--warmup_steps " + std::to_string(o.warmup_steps) +
                     " needs --lr_schedule cosine (the plateau schedule has no warm-up)");

  if (auto rc = env("TORCHELASTIC_RESTART_COUNT"); rc && !rc->empty())
    o.restart_count = static_cast<int>(parse_int_option(*rc, "TORCHELASTIC_RESTART_COUNT", 0, 1 << 20));
  if (auto ef = env("TORCHELASTIC_ERROR_FILE"); ef) o.launch_dir = launch_directory(*ef);
  if (auto omp = env("OMP_NUM_THREADS"); omp && !omp->empty()) o.omp_threads_set = true;
  return o;
}

std::string loop_options_usage(const TrainOptions& d) {
  const auto num = [](double v) {
    std::ostringstream s;
    s << v;
    return s.str();
  };
  return "  --epochs N            epochs to train (default " + std::to_string(d.epochs) + ")\n"
         "  --batch_size N        samples per step per process (default " + std::to_string(d.batch_size) + ")\n"
         "  --learning_rate X     learning rate (default " + num(d.learning_rate) + "; alias --lr)\n"
         "  --seed N              seed for model init and sampler shuffling (default " + std::to_string(d.seed) + ")\n"
         "  --checkpoint_dir DIR  per-epoch checkpoints and metrics.jsonl (default " + d.checkpoint_dir + ")\n" +
         R"(  --resume              continue the run in --checkpoint_dir from its newest
                        readable checkpoint, even with changed options (each is
                        named); automatic when TORCHELASTIC_RESTART_COUNT > 0,
                        which resumes only this run's own checkpoints. A fresh
                        run refuses a directory holding an earlier run.
  --checkpoint_every_steps N
                        also checkpoint every N global steps, mid-epoch
                        (epoch_<E>_step_<S>.pt; only the newest is kept), so a
                        resume or a restart loses at most N steps; 0 = only
                        at each epoch's end (default)
  --max_steps_per_epoch N
                        at most N optimizer steps per epoch, for short runs
                        (0 = all; alias --max_steps, its older name)
  --total_steps N       stop after N optimizer steps in all, counted over the
                        epochs (the epoch it ends in is evaluated and
                        checkpointed there); 0 = no limit (default)
  --accumulate_batches N
                        one optimizer step per N batches of --batch_size: the
                        gradients of the first N-1 are kept locally (DDP's
                        no_sync) and averaged with the last's, as one batch N
                        times larger (default 1)
  --grad_clip_norm X    scale the averaged gradients down to a global L2 norm
                        of at most X before each step (default: off)
  --eval_every_steps N  also evaluate every N global steps, mid-epoch (printed
                        and given to the callbacks); 0 = at each epoch's end
                        only (default)
  --no_shuffle          keep the dataset order (deterministic runs)
  --save_final PATH     write the final weights as a dict of tensors that
                        Python reads with torch.load(PATH)
  --log_interval N      steps between progress lines when stdout is not a terminal (default 50)
  --lr_schedule S       plateau (ReduceLROnPlateau on the monitored metric, per
                        epoch; default) or cosine (linear warm-up, then cosine
                        decay to 0 at the last step, per step)
  --warmup_steps N      cosine: steps of linear warm-up from 0 (default 0)
  --lr_factor X         ReduceLROnPlateau factor on the monitored metric (default 0.1)
  --lr_patience N       ReduceLROnPlateau patience in epochs (default 10)
  --num_threads N       intra-op threads per process (default: cores / local world size)
  --no_split_batch      one process with 2+ threads: run each batch whole on all
                        the threads, not in two halves at once (the default
                        where the program supports it; same sums, other order)
  --device D            cpu, cuda (one GPU per rank: cuda:LOCAL_RANK, NCCL; with
                        DDP_BACKEND=gloo ranks may share GPUs) or auto (cuda
                        when a GPU is visible; default)
  --local_rank N        accepted for legacy launchers; the environment wins
  -h, --help            this text
)";
}

}  // namespace ddp::loop
