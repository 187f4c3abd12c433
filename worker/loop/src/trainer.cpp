#include "ddp/loop/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>

#include "format.h"
#include "checkpoint_run.h"
#include "evaluation.h"
#include "batch_halves.h"
#include "train_epoch.h"
#include "ddp/loop/checkpoint_files.h"
#include "ddp/loop/plateau_scheduler.h"
#include "ddp/loop/progress.h"
#include "ddp/loop/run_identity.h"
#include "ddp/worker/checkpoint.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/sampler.h"

namespace ddp::loop {
namespace {

namespace fs = std::filesystem;

void set_learning_rate(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

// "macro_f1" -> "macro f1", as the seeds print it.
std::string spoken(std::string metric) {
  for (auto& c : metric)
    if (c == '_') c = ' ';
  return metric;
}

// The run's state before its first epoch, or loaded from the checkpoint it
// resumes (then the optimizer, model, RNG and schedule are restored too).
TrainState initial_state(const TrainOptions& o, ddp::worker::ProcessGroup& pg, torch::nn::Module& model,
                         torch::optim::Optimizer& optimizer, PlateauScheduler& scheduler, std::ostream& log) {
  TrainState state;
  state.learning_rate = o.learning_rate;
  state.world_size = pg.world_size();
  state.batch_size = o.batch_size;
  // Every checkpoint of this run records the options it runs with and the
  // launches of its ranks.
  state.run_identity = format_identity(run_identity(o));
  state.launches = gather_launches(o, pg);
  if (!o.should_resume()) return state;
  const int epoch = choose_resume_epoch(o, pg, state.launches, log);
  if (epoch == 0) {
    log << "no checkpoint in '" << o.checkpoint_dir << "'; starting from epoch 1" << std::endl;
    return state;
  }
  const std::string path = epoch_checkpoint_path(o.checkpoint_dir, epoch);
  auto ckpt = ddp::worker::load_checkpoint(path, pg.device());
  ddp::worker::apply_checkpoint(ckpt, model, &optimizer, /*restore_rng=*/true);
  TrainState saved = load_train_state(ckpt, path);
  if (saved.world_size != pg.world_size())
    log << "note: checkpoint was written with world size " << saved.world_size << "; continuing with world size "
        << pg.world_size() << " (the sample order of the remaining epochs differs)" << std::endl;
  saved.world_size = state.world_size;
  saved.batch_size = state.batch_size;
  saved.run_identity = state.run_identity;
  saved.launches = state.launches;
  set_learning_rate(optimizer, saved.learning_rate);
  scheduler.set_state(saved.plateau);
  log << "resumed from " << path << " (epoch " << saved.epochs_done << ", step " << saved.global_step
      << ", restart " << o.restart_count << ")" << std::endl;
  return saved;
}

// Updates the best epoch of each tracked metric.
void track_best(const std::vector<Monitor>& tracked, const Evaluation& eval, int epoch, const std::string& ckpt_name,
                TrainState& state) {
  for (const Monitor& m : tracked) {
    const double v = metric_value(eval, m.metric);
    auto it = state.best.find(m.metric);
    const bool better = it == state.best.end() || it->second.epoch == 0 ||
                        (m.higher_is_better ? v > it->second.value : v < it->second.value);
    if (better) state.best[m.metric] = {v, epoch, ckpt_name};
  }
}

std::string epoch_line(const EpochRecord& rec, int epochs) {
  std::ostringstream line;
  line << "epoch " << rec.epoch << "/" << epochs << ": train_loss " << fmt("%.4f", rec.train_loss) << " test_loss "
       << fmt("%.4f", rec.test_loss);
  for (const auto& [name, value] : rec.metrics) line << " " << name << " " << fmt("%.4f", value);
  line << " (" << rec.eval_samples << " test samples) " << fmt("%.0f", rec.samples_per_second) << " samples/s";
  return line.str();
}

}  // namespace

TrainResult run_training(const TrainOptions& o, const std::shared_ptr<ddp::worker::ProcessGroup>& pg_ptr,
                         TrainingTask& task, std::ostream& out, bool out_is_tty, const LoopHooks& hooks) {
  ddp::worker::ProcessGroup& pg = *pg_ptr;
  const int rank = pg.rank();
  const int world = pg.world_size();
  const bool main_rank = rank == 0;
  std::ostringstream discard;
  std::ostream& log = main_rank ? out : discard;

  // Same initial weights on every rank and for every world size; DDP then
  // broadcasts rank 0's anyway, as Python's does.
  torch::manual_seed(o.seed);
  const std::shared_ptr<torch::nn::Module> model = task.make_model();
  // Data stays on the CPU; each batch moves to the backend's device (CPU for
  // Gloo, cuda:LOCAL_RANK for NCCL).
  const c10::Device device = pg.device();
  model->to(device);
  const std::vector<torch::Tensor> params = model->parameters();
  const std::unique_ptr<torch::optim::Optimizer> optimizer = task.make_optimizer(params, o.learning_rate);
  const Monitor monitor = task.monitor();
  const std::vector<Monitor> tracked = task.tracked();

  PlateauOptions plateau_opts;
  plateau_opts.mode_max = monitor.higher_is_better;
  plateau_opts.factor = o.lr_factor;
  plateau_opts.patience = o.lr_patience;
  PlateauScheduler scheduler(plateau_opts);

  const auto dir_lock = prepare_checkpoint_dir(o, pg, log);
  TrainState state = initial_state(o, pg, *model, *optimizer, scheduler, log);
  const std::string metrics_file = metrics_path(o.checkpoint_dir);

  // After a resume, so the broadcast at construction carries the loaded
  // weights (every rank loaded the same file anyway).
  ddp::worker::DistributedDataParallel ddp(model, pg_ptr, task.ddp_options());
  ddp::worker::DistributedSampler sampler(static_cast<std::size_t>(task.train_size()), static_cast<std::size_t>(world),
                                          static_cast<std::size_t>(rank), !o.no_shuffle, o.seed);
  ProgressPrinter progress(out, main_rank, out_is_tty, o.log_interval);
  TrainResult result;

  const auto per_rank = static_cast<std::int64_t>(sampler.num_samples());
  const std::int64_t full_steps = task.drop_last() ? per_rank / o.batch_size : (per_rank + o.batch_size - 1) / o.batch_size;
  // One process with 2+ threads: each batch in two halves, one a thread.
  const std::unique_ptr<BatchHalves> halves =
      o.split_batch ? BatchHalves::make_if_useful(task, *model, params, world, device) : nullptr;
  EpochContext ctx{pg, task, ddp, *optimizer, params, progress, hooks};
  ctx.halves = halves.get();
  ctx.epochs = o.epochs;
  ctx.batch_size = o.batch_size;
  ctx.restart_count = o.restart_count;
  ctx.steps_per_epoch = o.max_steps > 0 ? std::min(o.max_steps, full_steps) : full_steps;
  log << o.program << ": world size " << world << ", batch " << o.batch_size << " per process ("
      << o.batch_size * world << " global), " << ctx.steps_per_epoch << " steps per epoch, epochs "
      << state.epochs_done + 1 << ".." << o.epochs << ", " << torch::get_num_threads() << " threads per process"
      << (halves ? " (each batch in two halves at once, on " + std::to_string(halves->threads_per_half()) + " + " +
                       std::to_string(torch::get_num_threads() - halves->threads_per_half()) + ")"
                 : std::string())
      << ", device " << device.str() << " (" << pg.backend()
      << (pg.shared_memory_allreduce() ? ", sums through shared memory" : "") << "), checkpoints in "
      << o.checkpoint_dir << "; " << task.describe() << std::endl;

  for (int epoch = state.epochs_done + 1; epoch <= o.epochs; ++epoch) {
    // Python's sampler.set_epoch(epoch): the shuffle depends on (seed, epoch)
    // only, which is what lets a resumed run replay the same order.
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const double epoch_lr = state.learning_rate;
    const EpochSteps steps = train_epoch(ctx, epoch, sampler.indices(), state);

    // The seeds' reduce_mean: every rank reports the same epoch loss.
    const double train_loss = ddp::worker::reduce_mean(
        pg, ctx.steps_per_epoch > 0 ? steps.loss_sum / static_cast<double>(ctx.steps_per_epoch) : 0.0);
    const double global_samples = ddp::worker::reduce_sum(pg, static_cast<double>(steps.local_samples));
    const Evaluation eval = evaluate(task, *model, pg);

    state.learning_rate = scheduler.step(metric_value(eval, monitor.metric), state.learning_rate);
    state.plateau = scheduler.state();
    if (state.learning_rate != epoch_lr) {
      set_learning_rate(*optimizer, state.learning_rate);
      log << "ReduceLROnPlateau: " << monitor.metric << " did not improve for " << o.lr_patience + 1
          << " epochs; learning rate " << epoch_lr << " -> " << state.learning_rate << std::endl;
    }
    state.epochs_done = epoch;
    const std::string ckpt_path = epoch_checkpoint_path(o.checkpoint_dir, epoch);
    track_best(tracked, eval, epoch, fs::path(ckpt_path).filename().string(), state);

    EpochRecord rec;
    rec.epoch = epoch;
    rec.global_step = state.global_step;
    rec.train_loss = train_loss;
    rec.test_loss = eval.loss;
    rec.metrics = eval.metrics;
    rec.learning_rate = epoch_lr;
    rec.train_samples = static_cast<std::int64_t>(global_samples);
    rec.eval_samples = eval.samples;
    // Every step ends in an all-reduce, so ranks finish within one step of
    // each other and rank 0's clock measures the job's throughput.
    rec.train_seconds = steps.seconds;
    rec.samples_per_second = steps.seconds > 0 ? global_samples / steps.seconds : 0.0;
    rec.world_size = world;
    rec.checkpoint = ckpt_path;
    result.epochs.push_back(rec);
    log << epoch_line(rec, o.epochs) << std::endl;

    // The checkpoint first, then its metrics.jsonl line, so the line never
    // names a file that a failed save did not write; the checkpoint carries
    // the line, and a resume puts it back if a crash came in between.
    state.metrics_line = to_json_line(rec);
    auto ckpt = ddp::worker::make_checkpoint(*model, optimizer.get(), epoch, state.global_step);
    store_train_state(state, ckpt);
    ddp::worker::save_checkpoint(pg, ckpt_path, ckpt);
    ddp::worker::rank0_decides(pg, [&] {
      append_metrics(metrics_file, rec);
      return std::string();
    });
    log << "saved " << ckpt_path << std::endl;
  }

  log << "training finished: " << state.epochs_done << " epochs, " << state.global_step << " steps" << std::endl;
  for (const Monitor& m : tracked) {
    const auto it = state.best.find(m.metric);
    if (it == state.best.end() || it->second.epoch == 0) continue;
    log << "best " << spoken(m.metric) << ": " << fmt("%.4f", it->second.value) << " in epoch: " << it->second.epoch
        << ", saved in: " << (fs::path(o.checkpoint_dir) / it->second.checkpoint).string() << std::endl;
  }
  if (!o.save_final.empty()) {
    if (main_rank) {
      ddp::worker::save_weights_for_python(o.save_final, *model);
      log << "final weights written to " << o.save_final << " (Python: torch.load(path))" << std::endl;
    }
    ddp::worker::barrier(pg);
  }
  result.state = state;
  return result;
}

}  // namespace ddp::loop
