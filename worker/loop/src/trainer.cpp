#include "ddp/loop/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>
#include <utility>

#include "format.h"
#include "checkpoint_run.h"
#include "evaluation.h"
#include "batch_halves.h"
#include "train_epoch.h"
#include "in_place_recovery.h"
#include "ddp/loop/checkpoint_files.h"
#include "ddp/loop/lr_schedule.h"
#include "ddp/loop/progress.h"
#include "ddp/loop/rank_snapshot.h"
#include "ddp/loop/run_identity.h"
#include "ddp/worker/checkpoint.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/recovery.h"
#include "ddp/worker/sampler.h"

namespace ddp::loop {
namespace {

namespace fs = std::filesystem;

// "macro_f1" -> "macro f1", as the seeds print it.
std::string spoken(std::string metric) {
  for (auto& c : metric)
    if (c == '_') c = ' ';
  return metric;
}

// The run's state before its first epoch, or loaded from the checkpoint it
// resumes, an epoch's or a step's (then the optimizer, model, RNG and
// schedule are restored too, and a step's run continues mid-epoch).
TrainState initial_state(const TrainOptions& o, ddp::worker::ProcessGroup& pg, TrainingTask& task,
                         torch::nn::Module& model, torch::optim::Optimizer& optimizer, LrSchedule& schedule,
                         std::ostream& log) {
  TrainState state;
  state.learning_rate = o.learning_rate;
  state.world_size = pg.world_size();
  state.batch_size = o.batch_size;
  state.accumulate_batches = o.accumulate_batches;
  schedule.save(state);
  // Every checkpoint of this run records the options it runs with and the
  // launches of its ranks.
  state.run_identity = format_identity(run_identity(o));
  state.launches = gather_launches(o, pg);
  if (!o.should_resume()) return state;
  const std::string path = choose_resume_checkpoint(o, pg, state.launches, log);
  if (path.empty()) {
    log << "no checkpoint in '" << o.checkpoint_dir << "'; starting from epoch 1" << std::endl;
    return state;
  }
  TrainState saved = restore_snapshot(ddp::worker::load_checkpoint(path, pg.device()), path, model, optimizer,
                                      pg.rank(), pg.world_size(), pg.device(), task.best_keys());
  if (saved.world_size != pg.world_size())
    log << "note: checkpoint was written with world size " << saved.world_size << "; continuing with world size "
        << pg.world_size() << " (the sample order of the remaining epochs differs)" << std::endl;
  if (saved.epoch_steps_done > 0 && (saved.world_size != pg.world_size() || saved.batch_size != o.batch_size ||
                                     saved.accumulate_batches != o.accumulate_batches)) {
    // Another shape of step: skip as many samples as were done, rounded up
    // to whole steps of the new shape.
    const auto shape = [](int world, int batch, int accumulate) {
      return std::to_string(world) + " x " + std::to_string(batch) +
             (accumulate > 1 ? " x " + std::to_string(accumulate) + " batches" : std::string());
    };
    const std::int64_t samples_done =
        saved.epoch_steps_done * saved.batch_size * saved.accumulate_batches * saved.world_size;
    const std::int64_t per_step = static_cast<std::int64_t>(o.batch_size) * o.accumulate_batches * pg.world_size();
    const std::int64_t steps = (samples_done + per_step - 1) / per_step;
    log << "note: the checkpoint is " << saved.epoch_steps_done << " steps of "
        << shape(saved.world_size, saved.batch_size, saved.accumulate_batches) << " samples into epoch "
        << saved.epochs_done + 1 << "; continuing after " << steps << " steps of "
        << shape(pg.world_size(), o.batch_size, o.accumulate_batches) << std::endl;
    saved.epoch_steps_done = steps;
  }
  saved.world_size = state.world_size;
  saved.batch_size = state.batch_size;
  saved.accumulate_batches = state.accumulate_batches;
  saved.run_identity = state.run_identity;
  saved.launches = state.launches;
  set_learning_rate(optimizer, saved.learning_rate);
  schedule.load(saved);
  schedule.save(saved);  // in its own terms (another schedule's checkpoint)
  task.load_state(saved.task);
  log << "resumed from " << path << " (epoch " << saved.epochs_done << ", step " << saved.global_step
      << ", restart " << o.restart_count << ")";
  if (saved.epoch_steps_done > 0)
    log << "; continuing epoch " << saved.epochs_done + 1 << " after its step " << saved.epoch_steps_done;
  log << std::endl;
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

// Writes the step checkpoint `steps_done` steps into `epoch` (every rank
// calls it: the sums and the generators are gathered) and removes the step
// checkpoint before it. Only the newest step checkpoint is kept: it holds
// the whole model and optimizer (ddp-text's 51 MB) and is written every N
// steps, so keeping them all would fill the disk, while the epoch files
// that best-epoch picking names stay as they were. The older one goes only
// once the new one is safely on disk (atomic, fsync'ed), so a kill at any
// moment leaves one to resume.
void save_step_checkpoint(ddp::worker::ProcessGroup& pg, const TrainOptions& o, const TrainState& state, int epoch,
                          std::int64_t steps_done, const EpochSteps& so_far, TrainingTask& task,
                          torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  TrainState s = state;
  s.task = {};
  task.save_state(s.task);
  s.epoch_steps_done = steps_done;
  s.epoch_loss_sum = ddp::worker::reduce_sum(pg, so_far.loss_sum);
  s.epoch_samples = static_cast<std::int64_t>(ddp::worker::reduce_sum(pg, static_cast<double>(so_far.local_samples))) +
                    so_far.resumed_samples;
  s.epoch_seconds = so_far.seconds;
  capture_rng(pg, s);
  const std::string path = step_checkpoint_path(o.checkpoint_dir, epoch, steps_done);
  ddp::worker::save_checkpoint(pg, path, make_snapshot(s, model, optimizer, task.best_keys()));
  if (pg.rank() == 0) remove_step_checkpoints(o.checkpoint_dir, fs::path(path).filename().string());
}

// The default callback: each epoch's line appended to metrics.jsonl by rank
// 0, after its checkpoint (a failure to write it stops every rank).
class MetricsFile : public Callback {
 public:
  MetricsFile(ddp::worker::ProcessGroup& pg, std::string path) : pg_(pg), path_(std::move(path)) {}
  void on_epoch_end(int, const EpochRecord& r) override {
    ddp::worker::rank0_decides(pg_, [&] {
      append_metrics(path_, r);
      return std::string();
    });
  }

 private:
  ddp::worker::ProcessGroup& pg_;
  std::string path_;
};

std::shared_ptr<Callback> metrics_file_callback(ddp::worker::ProcessGroup& pg, const std::string& path) {
  return std::make_shared<MetricsFile>(pg, path);
}

// --eval_every_steps: the whole test set evaluated mid-epoch (collective),
// a line for the log, and the callbacks told. It changes no state: the
// schedule and the best epochs go by the epochs' evaluations.
void evaluate_mid_epoch(TrainingTask& task, torch::nn::Module& model, ddp::worker::ProcessGroup& pg,
                        const StepEnd& at, const Callbacks& callbacks, std::ostream& log) {
  const Evaluation eval = evaluate(task, model, pg);
  std::ostringstream line;
  line << "step " << at.global_step << " (epoch " << at.epoch << ", step " << at.step << "/" << at.steps
       << "): test_loss " << fmt("%.4f", eval.loss);
  for (const auto& [name, value] : eval.metrics) line << " " << name << " " << fmt("%.4f", value);
  log << line.str() << " (" << eval.samples << " test samples)" << std::endl;
  for (const auto& c : callbacks)
    c->on_eval_end({pg.rank(), at.epoch, at.global_step, false, eval.loss, eval.samples, eval.metrics});
}

// The start line's tail for the step options not at their defaults.
std::string step_options_line(const TrainOptions& o, const LrSchedule& schedule, std::int64_t run_steps) {
  std::string out;
  if (schedule.name() != "plateau") {
    out += "; lr schedule " + schedule.name() + " over " + std::to_string(run_steps) + " steps";
    if (o.warmup_steps > 0) out += " (warm-up " + std::to_string(o.warmup_steps) + ")";
  }
  if (o.total_steps > 0) out += "; at most " + std::to_string(o.total_steps) + " steps in all";
  if (o.grad_clip_norm > 0) out += "; gradients clipped to norm " + fmt("%g", o.grad_clip_norm);
  if (o.eval_every_steps > 0) out += "; evaluation every " + std::to_string(o.eval_every_steps) + " steps";
  return out;
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

  ddp::worker::DistributedSampler sampler(static_cast<std::size_t>(task.train_size()), static_cast<std::size_t>(world),
                                          static_cast<std::size_t>(rank), !o.no_shuffle, o.seed);
  const auto per_rank = static_cast<std::int64_t>(sampler.num_samples());
  const std::int64_t full_batches =
      task.drop_last() ? per_rank / o.batch_size : (per_rank + o.batch_size - 1) / o.batch_size;
  const std::int64_t full_steps = (full_batches + o.accumulate_batches - 1) / o.accumulate_batches;
  const std::int64_t steps_per_epoch = o.max_steps > 0 ? std::min(o.max_steps, full_steps) : full_steps;
  const std::int64_t run_steps = o.total_steps > 0 ? o.total_steps : steps_per_epoch * o.epochs;
  const std::unique_ptr<LrSchedule> schedule =
      task.make_schedule({o, steps_per_epoch, run_steps, monitor.metric, monitor.higher_is_better});

  // In-place recovery (in_place_recovery.h): a rank the launcher brought
  // back takes the survivors' state instead of the checkpoint directory's
  // setup and resume, which the survivors did long ago.
  InPlaceRecovery recovery(pg, *model, *optimizer);
  const std::uint64_t joining = recovery.on() ? ddp::worker::recovery_generation_at_start() : 0;
  std::unique_ptr<CheckpointDirLock> dir_lock;
  TrainState state;
  RedoPoint join_point;
  if (joining > 0) {
    if (main_rank) dir_lock = std::make_unique<CheckpointDirLock>(o.checkpoint_dir);
    join_point = recovery.join();
    state = join_point.state;
    schedule->load(state);
    log << "rank " << rank << " rejoined in place (generation " << joining << "): epoch " << join_point.epoch
        << ", redoing its step " << join_point.step + 1 << " with the survivors' state" << std::endl;
  } else {
    dir_lock = prepare_checkpoint_dir(o, pg, log);
    state = initial_state(o, pg, task, *model, *optimizer, *schedule, log);
  }
  const LegacyBestKeys best_keys = task.best_keys();

  // After a resume, so the broadcast at construction carries the loaded
  // weights (every rank loaded the same file anyway). An in-place recovery
  // makes it anew: its buckets and shared memory belong to the group.
  auto ddp = std::make_unique<ddp::worker::DistributedDataParallel>(model, pg_ptr, task.ddp_options());
  ProgressPrinter progress(out, main_rank, out_is_tty, o.log_interval);
  TrainResult result;
  // metrics.jsonl first, then the program's.
  Callbacks callbacks{metrics_file_callback(pg, metrics_path(o.checkpoint_dir))};
  callbacks.insert(callbacks.end(), hooks.callbacks.begin(), hooks.callbacks.end());

  // One process with 2+ threads: each batch in two halves, one a thread
  // (not when accumulating: the halves weigh their losses within a batch).
  const std::unique_ptr<BatchHalves> halves = o.split_batch && o.accumulate_batches == 1
                                                  ? BatchHalves::make_if_useful(task, *model, params, world, device)
                                                  : nullptr;
  EpochContext ctx{pg,      task, ddp.get(), *optimizer, params, progress, hooks, 0,  0,  0,  0, nullptr, {}, 1, 0,
                   false,   0,    nullptr,   {},         nullptr, {},      {},    -1, {}};
  if (recovery.on()) {
    ctx.recovery = &recovery;
    ctx.drop_ddp = [&] {
      ddp.reset();
      // The gradients were views of its buckets.
      for (auto p : params) p.mutable_grad() = at::Tensor();
    };
    ctx.make_ddp = [&] {
      ddp = std::make_unique<ddp::worker::DistributedDataParallel>(model, pg_ptr, task.ddp_options());
      ctx.ddp = ddp.get();
    };
    if (joining > 0) {
      ctx.join_step = join_point.step;
      ctx.join_sums = join_point.sums;
    }
  }
  ctx.halves = halves.get();
  ctx.epochs = o.epochs;
  ctx.batch_size = o.batch_size;
  ctx.restart_count = o.restart_count;
  ctx.steps_per_epoch = steps_per_epoch;
  ctx.accumulate_batches = o.accumulate_batches;
  ctx.grad_clip_norm = o.grad_clip_norm;
  ctx.drop_last = task.drop_last();
  ctx.schedule = schedule.get();
  ctx.on_step_end = [&](const StepEnd& end) {
    for (const auto& c : callbacks) c->on_step_end(end);
    // A mid-epoch evaluation; the epoch's last step is followed by the epoch's.
    if (o.eval_every_steps > 0 && end.global_step % o.eval_every_steps == 0 && end.step < ctx.epoch_end_step)
      evaluate_mid_epoch(task, *model, pg, end, callbacks, log);
  };
  if (o.checkpoint_every_steps > 0)
    ctx.after_step = [&](int epoch, std::int64_t steps_done, const EpochSteps& so_far) {
      if (state.global_step % o.checkpoint_every_steps == 0)
        save_step_checkpoint(pg, o, state, epoch, steps_done, so_far, task, *model, *optimizer);
    };
  log << o.program << ": world size " << world << ", batch " << o.batch_size << " per process"
      << (o.accumulate_batches > 1 ? " x " + std::to_string(o.accumulate_batches) + " batches a step" : std::string())
      << " (" << static_cast<std::int64_t>(o.batch_size) * o.accumulate_batches * world << " global), "
      << ctx.steps_per_epoch << " steps per epoch, epochs "
      << state.epochs_done + 1 << ".." << o.epochs << ", " << torch::get_num_threads() << " threads per process"
      << (halves ? " (each batch in two halves at once, on " + std::to_string(halves->threads_per_half()) + " + " +
                       std::to_string(torch::get_num_threads() - halves->threads_per_half()) + ")"
                 : std::string())
      << ", device " << device.str() << " (" << pg.backend()
      << (pg.shared_memory_allreduce() ? ", sums through shared memory" : "") << "), checkpoints in "
      << o.checkpoint_dir << "; " << task.describe() << step_options_line(o, *schedule, run_steps) << std::endl;

  for (int epoch = state.epochs_done + 1; epoch <= o.epochs; ++epoch) {
    // --total_steps may end the run within this epoch, or before it.
    ctx.epoch_end_step = o.total_steps > 0 ? std::min(ctx.steps_per_epoch,
                                                      state.epoch_steps_done + o.total_steps - state.global_step)
                                           : ctx.steps_per_epoch;
    if (ctx.epoch_end_step <= state.epoch_steps_done) break;
    // Python's sampler.set_epoch(epoch): the shuffle depends on (seed, epoch)
    // only, which is what lets a resumed run replay the same order.
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const double epoch_lr = state.learning_rate;
    const EpochSteps steps = train_epoch(ctx, epoch, sampler.indices(), state);
    // A resumed epoch's sums are in `steps` now; the next starts afresh.
    state.epoch_steps_done = 0;
    state.epoch_loss_sum = 0;
    state.epoch_samples = 0;
    state.epoch_seconds = 0;

    // The seeds' reduce_mean: every rank reports the same epoch loss.
    const double train_loss = ddp::worker::reduce_mean(
        pg, ctx.epoch_end_step > 0 ? steps.loss_sum / static_cast<double>(ctx.epoch_end_step) : 0.0);
    const double global_samples = ddp::worker::reduce_sum(pg, static_cast<double>(steps.local_samples)) +
                                  static_cast<double>(steps.resumed_samples);
    const Evaluation eval = evaluate(task, *model, pg);

    for (const auto& c : callbacks)
      c->on_eval_end({rank, epoch, state.global_step, true, eval.loss, eval.samples, eval.metrics});

    std::string note;
    const double lr_before = state.learning_rate;
    state.learning_rate = schedule->at_epoch_end(metric_value(eval, monitor.metric), state.learning_rate, note);
    schedule->save(state);
    if (state.learning_rate != lr_before) set_learning_rate(*optimizer, state.learning_rate);
    if (!note.empty()) log << note << std::endl;
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
    capture_rng(pg, state);
    state.task = {};
    task.save_state(state.task);
    ddp::worker::save_checkpoint(pg, ckpt_path, make_snapshot(state, *model, *optimizer, best_keys));
    // The epoch's checkpoint is newer than any step checkpoint (also one a
    // resume without --checkpoint_every_steps started from).
    if (main_rank) remove_step_checkpoints(o.checkpoint_dir, "");
    for (const auto& c : callbacks) c->on_epoch_end(rank, rec);  // metrics.jsonl's line first
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
