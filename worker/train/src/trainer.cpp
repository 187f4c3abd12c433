#include "ddp/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include "ddp/common/atomic_file.h"
#include "ddp/train/checkpoint_dir_lock.h"
#include "ddp/train/checkpoint_files.h"
#include "ddp/train/confusion_matrix.h"
#include "ddp/train/eval_shard.h"
#include "ddp/train/plateau_scheduler.h"
#include "ddp/train/progress.h"
#include "ddp/train/run_identity.h"
#include "ddp/worker/checkpoint.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/ddp.h"
#include "ddp/worker/fused_adam.h"
#include "ddp/worker/peer_failure.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/sampler.h"
#include "ddp/worker/training_step.h"

namespace ddp::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void set_learning_rate(torch::optim::Adam& opt, double lr) {
  for (auto& group : opt.param_groups())
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
}

struct EvalResult {
  ConfusionMatrix matrix;
  double loss = 0;  // mean over all counted samples
};

// Every rank scores its contiguous slice; the per-rank confusion matrices
// and loss sums are added up with one all-reduce, so the totals count each
// test sample exactly once (DistributedSampler would pad with repeats).
EvalResult evaluate(TrainingTask& task, torch::nn::Module& model, ddp::worker::ProcessGroup& pg) {
  const c10::Device device = pg.device();
  const int classes = task.num_classes();
  const std::int64_t cells = static_cast<std::int64_t>(classes) * classes;
  torch::NoGradGuard no_grad;
  model.eval();
  const Shard shard = contiguous_shard(static_cast<std::size_t>(task.test_size()),
                                       static_cast<std::size_t>(pg.world_size()),
                                       static_cast<std::size_t>(pg.rank()));
  // counts[0..cells-1]: confusion matrix (target-major); counts[cells]: loss
  // sum. Doubles hold counts exactly far beyond any test set and let one
  // all-reduce carry both.
  auto counts = torch::zeros({cells + 1}, torch::TensorOptions(torch::kDouble).device(device));
  const std::int64_t batch = task.eval_batch();
  for (auto begin = static_cast<std::int64_t>(shard.begin); begin < static_cast<std::int64_t>(shard.end);
       begin += batch) {
    const auto end = std::min<std::int64_t>(begin + batch, static_cast<std::int64_t>(shard.end));
    const TaskOutput out = task.forward_test(begin, end, device);
    counts[cells] += torch::nn::functional::cross_entropy(
                         out.logits, out.labels,
                         torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                         .to(torch::kDouble);
    auto cell = out.labels * classes + out.logits.argmax(1);
    counts.narrow(0, 0, cells).add_(torch::bincount(cell, {}, cells).to(torch::kDouble));
  }
  model.train();
  ddp::worker::reduce_sum_(pg, counts);

  std::vector<std::int64_t> cell_counts(static_cast<std::size_t>(cells));
  const at::Tensor host_counts = counts.cpu();
  auto acc = host_counts.accessor<double, 1>();
  for (std::int64_t i = 0; i < cells; ++i) cell_counts[static_cast<std::size_t>(i)] = std::llround(acc[i]);
  EvalResult r{ConfusionMatrix::from_counts(classes, cell_counts)};
  const auto total = r.matrix.total();
  r.loss = total > 0 ? acc[cells] / static_cast<double>(total) : 0.0;
  return r;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Writes and removes a probe file in `dir`; throws AtomicWriteError.
void probe_writable(const fs::path& dir, const std::string& name) {
  const std::string probe = (dir / name).string();
  ddp::write_file_atomically(probe, "ddp-train checks that it can write here\n");
  std::error_code ec;
  fs::remove(probe, ec);
}

// --save_final is written after the last epoch: a path that cannot be
// written is found now, not after the whole training.
void check_save_final(const std::string& path) {
  const fs::path target(path);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  if (fs::is_directory(target, ec))
    throw std::runtime_error("--save_final '" + path + "' is a directory; give a file path such as '" +
                             (target / "final.pt").string() + "'");
  if (!fs::is_directory(parent, ec))
    throw std::runtime_error("--save_final '" + path + "': the directory '" + parent.string() +
                             "' does not exist; create it or pass another --save_final");
  try {
    probe_writable(parent, ".ddp-train-save-final-test");
  } catch (const ddp::AtomicWriteError& e) {
    throw std::runtime_error("--save_final '" + path + "': the directory '" + parent.string() + "' is not writable (" +
                             e.what() + "); pass another --save_final");
  }
}

// Rank 0 creates the directory and checks that it can write there before
// any training, takes the directory's lock for the run (two runs never
// share a directory), removes temp files of writers killed mid-save, checks
// --save_final, and a fresh run refuses a directory holding another run's
// files (their metrics.jsonl would be lost and a restart would resume their
// checkpoints). rank0_decides stops every rank with rank 0's message.
// Returns rank 0's lock (null on the other ranks).
std::unique_ptr<CheckpointDirLock> prepare_checkpoint_dir(const TrainOptions& o, ddp::worker::ProcessGroup& pg,
                                                          std::ostream& log) {
  std::unique_ptr<CheckpointDirLock> lock;
  ddp::worker::rank0_decides(pg, [&] {
    const std::string& dir = o.checkpoint_dir;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      throw std::runtime_error("cannot create checkpoint directory '" + dir + "': " + ec.message() +
                               "; pass a writable --checkpoint_dir");
    try {
      probe_writable(dir, "ddp-train-write-test");
    } catch (const ddp::AtomicWriteError& e) {
      throw std::runtime_error("checkpoint directory '" + dir + "' is not writable (" + e.what() +
                               "); pass a writable --checkpoint_dir");
    }
    lock = std::make_unique<CheckpointDirLock>(dir);
    for (const auto& name : remove_stale_temp_files(dir))
      log << "removed '" << (fs::path(dir) / name).string()
          << "', left by a " << o.program << " killed while writing it" << std::endl;
    if (!o.save_final.empty()) check_save_final(o.save_final);
    if (o.should_resume()) return std::string();
    const std::string held = describe_earlier_run(dir);
    if (!held.empty())
      throw std::runtime_error("checkpoint directory '" + dir + "' already holds an earlier run's " + held +
                               "; continue that run with --resume, pass another --checkpoint_dir, or remove "
                               "those files");
    truncate_metrics_after(metrics_path(dir), 0);
    return std::string();
  });
  return lock;
}

// Every rank's launch ("host:dir", launch_directory), sorted, one per line;
// "" when no rank knows its launch. Collective.
std::string gather_launches(const TrainOptions& o, ddp::worker::ProcessGroup& pg) {
  const std::string mine = o.launch_dir.empty() ? std::string() : this_host() + ":" + o.launch_dir;
  at::Tensor longest = at::full({1}, static_cast<std::int64_t>(mine.size()), at::TensorOptions().dtype(at::kLong))
                           .to(pg.device());
  pg.allreduce(longest, ddp::worker::ReduceOp::Max);
  const auto n = longest.cpu().item<std::int64_t>();
  if (n == 0) return "";
  at::Tensor bytes = at::zeros({n}, at::kByte);
  std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  std::set<std::string> all;
  for (const at::Tensor& t : pg.all_gather(bytes.to(pg.device()))) {
    const at::Tensor c = t.cpu().contiguous();
    std::string one(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(n));
    one.resize(std::strlen(one.c_str()));
    if (!one.empty()) all.insert(one);
  }
  std::string out;
  for (const auto& l : all) out += (out.empty() ? "" : "\n") + l;
  return out;
}

bool launches_overlap(const std::string& a, const std::string& b) {
  std::set<std::string> in_a;
  std::istringstream sa(a), sb(b);
  for (std::string l; std::getline(sa, l);) in_a.insert(l);
  for (std::string l; std::getline(sb, l);)
    if (in_a.count(l)) return true;
  return false;
}

// Stops every rank together when a loss is NaN or infinite: one all-reduce
// (min) of "the lowest rank whose loss is not finite" per step. That rank
// names its loss; the others follow it (PeerFailure).
void stop_on_non_finite_loss(ddp::worker::ProcessGroup& pg, double loss, int epoch, std::int64_t step,
                             std::int64_t steps, std::int64_t global_step, double lr) {
  const int rank = pg.rank();
  const int world = pg.world_size();
  at::Tensor first_bad = at::full({1}, static_cast<double>(std::isfinite(loss) ? world : rank),
                                  at::TensorOptions().dtype(at::kDouble).device(pg.device()));
  pg.allreduce(first_bad, ddp::worker::ReduceOp::Min);
  const int bad = static_cast<int>(first_bad.cpu().item<double>());
  if (bad >= world) return;
  const std::string where = "epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + " of " +
                            std::to_string(steps) + " (global step " + std::to_string(global_step) + ")";
  if (!std::isfinite(loss)) {
    const std::string value = std::isnan(loss) ? "nan" : fmt("%g", loss);  // not "-nan"
    throw std::runtime_error("training diverged: the loss of rank " + std::to_string(rank) + " is " + value + " at " +
                             where + " with learning rate " + fmt("%g", lr) +
                             "; every rank stops. Lower --learning_rate, or check the data");
  }
  throw ddp::worker::PeerFailure(bad, "training stopped at " + where + ": the loss of rank " + std::to_string(bad) +
                                          " is not finite (see rank " + std::to_string(bad) + "'s error)");
}

// Rank 0 picks the checkpoint to resume and tells the others, so all ranks
// load the same epoch even if a file appears while they look. The newest
// file that reads back wins (a damaged one is skipped with a warning); it
// must belong to this run: after a restart a checkpoint of another launch
// (`launches`: this job's, gather_launches) or with other options
// (run_identity.h) is another run's and is refused, while an explicit
// --resume continues it with a note naming the value in effect of each
// changed option. Also drops metrics.jsonl lines of the epochs that will be
// replayed, and puts back the chosen epoch's line when a crash came between
// its checkpoint and its line. Returns the epoch (0: none, start from 1).
int choose_resume_epoch(const TrainOptions& o, ddp::worker::ProcessGroup& pg, const std::string& launches,
                        std::ostream& log) {
  return static_cast<int>(ddp::worker::rank0_decides_int(pg, [&]() -> std::int64_t {
    const RunIdentity ours = run_identity(o);
    std::vector<std::string> damaged;
    int chosen = 0;
    TrainState chosen_state;
    for (const auto& found : list_checkpoints(o.checkpoint_dir)) {
      TrainState saved;
      try {
        saved = load_train_state(ddp::worker::load_checkpoint(found.path), found.path);
      } catch (const ddp::worker::CheckpointError& e) {
        log << "warning: " << e.what() << "; trying the previous epoch's checkpoint" << std::endl;
        damaged.push_back(found.path);
        continue;
      }
      // A restart whose launch wrote none of the checkpoints: its first
      // attempt refused the directory (the launcher restarts any failure).
      if (!o.resume && !launches.empty() && !saved.launches.empty() && !launches_overlap(saved.launches, launches))
        throw std::runtime_error(
            "checkpoint directory '" + o.checkpoint_dir + "' already holds an earlier run's " +
            describe_earlier_run(o.checkpoint_dir) + ", written by another launch (" +
            saved.launches.substr(0, saved.launches.find('\n')) +
            "), not by this job: a restarted run resumes only its own checkpoints; continue that run with --resume, "
            "pass another --checkpoint_dir, or remove those files");
      const auto changes = identity_changes(parse_identity(saved.run_identity), ours);
      if (!changes.empty() && !o.resume)
        throw std::runtime_error(
            "checkpoint '" + found.path + "' " +
            (saved.run_identity.empty() ? "does not record its run's options (written by an older ddp-train)"
                                        : "was written with other options: " + describe_changes(changes)) +
            ", so it belongs to another run; a restarted run resumes only its own "
            "checkpoints. Move the other run's files away or use another --checkpoint_dir "
            "(--resume continues it on purpose)");
      if (!changes.empty())
        log << "note: resuming '" << found.path << "', "
            << (saved.run_identity.empty()
                    ? "which does not record its run's options (written by an older ddp-train); continuing with "
                      "this run's options and the checkpoint's learning rate " + fmt("%g", saved.learning_rate)
                    : "written with other options; in effect from here: " +
                          describe_resume_effect(changes, saved.learning_rate))
            << std::endl;
      chosen = found.epoch;
      chosen_state = saved;
      break;
    }
    if (chosen == 0 && !damaged.empty()) {
      std::string list;
      for (const auto& d : damaged) list += (list.empty() ? "" : ", ") + d;
      throw std::runtime_error("no readable checkpoint in '" + o.checkpoint_dir + "' (damaged: " + list +
                               "); remove them to start from epoch 1, or restore a copy");
    }
    truncate_metrics_after(metrics_path(o.checkpoint_dir), chosen);
    if (chosen > 0 && !chosen_state.metrics_line.empty() &&
        restore_metrics_line(metrics_path(o.checkpoint_dir), chosen, chosen_state.metrics_line))
      log << "note: metrics.jsonl had no line for epoch " << chosen << " (stopped between its checkpoint and its "
          << "line); put back the one saved in the checkpoint" << std::endl;
    return chosen;
  }));
}

}  // namespace

TrainResult run_training(const TrainOptions& o, const std::shared_ptr<ddp::worker::ProcessGroup>& pg_ptr,
                         TrainingTask& task, std::ostream& out, bool out_is_tty) {
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
  // Adam, its step fused into one pass over memory (fused_adam.h).
  ddp::worker::FusedAdam optimizer(model->parameters(), torch::optim::AdamOptions(o.learning_rate));
  const std::vector<torch::Tensor> params = model->parameters();

  PlateauOptions plateau_opts;
  plateau_opts.factor = o.lr_factor;
  plateau_opts.patience = o.lr_patience;
  PlateauScheduler scheduler(plateau_opts);

  TrainState state;
  state.learning_rate = o.learning_rate;
  state.world_size = world;
  state.batch_size = o.batch_size;
  // Every checkpoint of this run records the options it runs with.
  const std::string identity = format_identity(run_identity(o));
  state.run_identity = identity;

  const auto dir_lock = prepare_checkpoint_dir(o, pg, log);
  const std::string launches = gather_launches(o, pg);
  state.launches = launches;
  const std::string metrics_file = metrics_path(o.checkpoint_dir);
  if (o.should_resume()) {
    const int epoch = choose_resume_epoch(o, pg, launches, log);
    if (epoch == 0) {
      log << "no checkpoint in '" << o.checkpoint_dir << "'; starting from epoch 1" << std::endl;
    } else {
      const std::string path = epoch_checkpoint_path(o.checkpoint_dir, epoch);
      auto ckpt = ddp::worker::load_checkpoint(path, device);
      ddp::worker::apply_checkpoint(ckpt, *model, &optimizer, /*restore_rng=*/true);
      const TrainState saved = load_train_state(ckpt, path);
      if (saved.world_size != world)
        log << "note: checkpoint was written with world size " << saved.world_size << "; continuing with world size "
            << world << " (the sample order of the remaining epochs differs)" << std::endl;
      state = saved;
      state.world_size = world;
      state.batch_size = o.batch_size;
      // Later checkpoints record the options and the launch this run continues with.
      state.run_identity = identity;
      state.launches = launches;
      set_learning_rate(optimizer, state.learning_rate);
      scheduler.set_state(state.plateau);
      log << "resumed from " << path << " (epoch " << state.epochs_done << ", step "
          << state.global_step << ", restart " << o.restart_count << ")" << std::endl;
    }
  }

  // After a resume, so the broadcast at construction carries the loaded
  // weights (every rank loaded the same file anyway).
  ddp::worker::DistributedDataParallel ddp(model, pg_ptr, task.ddp_options());
  ddp::worker::DistributedSampler sampler(static_cast<std::size_t>(task.train_size()), static_cast<std::size_t>(world),
                                          static_cast<std::size_t>(rank), !o.no_shuffle, o.seed);
  ProgressPrinter progress(out, main_rank, out_is_tty, o.log_interval);
  TrainResult result;

  const auto per_rank = static_cast<std::int64_t>(sampler.num_samples());
  const std::int64_t full_steps = task.drop_last() ? per_rank / o.batch_size : (per_rank + o.batch_size - 1) / o.batch_size;
  const std::int64_t steps_per_epoch = o.max_steps > 0 ? std::min(o.max_steps, full_steps) : full_steps;
  log << o.program << ": world size " << world << ", batch " << o.batch_size << " per process ("
      << o.batch_size * world << " global), " << steps_per_epoch << " steps per epoch, epochs "
      << state.epochs_done + 1 << ".." << o.epochs << ", " << torch::get_num_threads()
      << " threads per process, device " << device.str() << " (" << pg.backend()
      << (pg.shared_memory_allreduce() ? ", sums through shared memory" : "") << "), checkpoints in "
      << o.checkpoint_dir << "; " << task.describe() << std::endl;

  for (int epoch = state.epochs_done + 1; epoch <= o.epochs; ++epoch) {
    // Python's sampler.set_epoch(epoch): the shuffle depends on (seed, epoch)
    // only, which is what lets a resumed run replay the same order.
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    const std::vector<std::int64_t> indices = sampler.indices();
    const double epoch_lr = state.learning_rate;

    const auto t0 = Clock::now();
    double loss_sum = 0;
    std::int64_t local_samples = 0;
    for (std::int64_t step = 0; step < steps_per_epoch; ++step) {
      ddp::worker::training_step(pg, static_cast<std::uint64_t>(state.global_step + 1));  // the heartbeat's step
      if (o.die_rank == rank && o.restart_count == 0 && state.global_step == o.die_step) {
        // Test hook: die like a killed worker (no cleanup, no error file).
        std::cout.flush();
        std::raise(SIGKILL);
      }
      const std::int64_t begin = step * o.batch_size;
      const std::int64_t n = std::min<std::int64_t>(o.batch_size, static_cast<std::int64_t>(indices.size()) - begin);
      auto index = torch::from_blob(const_cast<std::int64_t*>(indices.data() + begin), {n}, torch::kLong);

      // Zeroed in place, not set to none (LibTorch 2.x's zero_grad default):
      // the gradients stay DDP's bucket views, so backward accumulates into
      // the buckets and nothing is copied or allocated for them per step.
      for (auto p : params)
        if (p.grad().defined()) {
          p.mutable_grad().detach_();
          p.mutable_grad().zero_();
        }
      ddp.prepare_forward();
      const TaskOutput batch = task.forward_train(index, device);
      auto loss = torch::nn::functional::cross_entropy(batch.logits, batch.labels);
      const double step_loss = loss.item<double>();
      // Before backward, so a diverged step changes no weights.
      stop_on_non_finite_loss(pg, step_loss, epoch, step + 1, steps_per_epoch, state.global_step + 1,
                              state.learning_rate);
      loss.backward();  // DDP averages the gradients across ranks here
      optimizer.step();

      loss_sum += step_loss;
      local_samples += n;
      state.global_step += 1;

      ProgressSnapshot snap;
      snap.epoch = epoch;
      snap.epochs = o.epochs;
      snap.step = step + 1;
      snap.steps = steps_per_epoch;
      snap.loss = loss_sum / static_cast<double>(step + 1);
      snap.samples = local_samples * world;
      snap.elapsed_s = seconds_since(t0);
      progress.update(snap);
    }
    progress.finish_epoch();
    // Every step ends in an all-reduce, so ranks finish within one step of
    // each other and rank 0's clock measures the job's throughput.
    const double train_seconds = seconds_since(t0);

    // The seeds' reduce_mean: every rank reports the same epoch loss.
    const double train_loss =
        ddp::worker::reduce_mean(pg, steps_per_epoch > 0 ? loss_sum / static_cast<double>(steps_per_epoch) : 0.0);
    const double global_samples = ddp::worker::reduce_sum(pg, static_cast<double>(local_samples));

    const EvalResult eval = evaluate(task, *model, pg);
    const double macro = eval.matrix.macro_f1();
    const double micro = eval.matrix.micro_f1();

    state.learning_rate = scheduler.step(macro, state.learning_rate);
    state.plateau = scheduler.state();
    if (state.learning_rate != epoch_lr) {
      set_learning_rate(optimizer, state.learning_rate);
      log << "ReduceLROnPlateau: macro-F1 did not improve for " << o.lr_patience + 1
          << " epochs; learning rate " << epoch_lr << " -> " << state.learning_rate << std::endl;
    }
    state.epochs_done = epoch;
    const std::string ckpt_path = epoch_checkpoint_path(o.checkpoint_dir, epoch);
    const std::string ckpt_name = fs::path(ckpt_path).filename().string();
    if (macro > state.best_macro.value) state.best_macro = {macro, epoch, ckpt_name};
    if (micro > state.best_micro.value) state.best_micro = {micro, epoch, ckpt_name};

    EpochRecord rec;
    rec.epoch = epoch;
    rec.global_step = state.global_step;
    rec.train_loss = train_loss;
    rec.test_loss = eval.loss;
    rec.accuracy = eval.matrix.accuracy();
    rec.macro_f1 = macro;
    rec.micro_f1 = micro;
    rec.learning_rate = epoch_lr;
    rec.train_samples = static_cast<std::int64_t>(global_samples);
    rec.eval_samples = eval.matrix.total();
    rec.train_seconds = train_seconds;
    rec.samples_per_second = train_seconds > 0 ? global_samples / train_seconds : 0.0;
    rec.world_size = world;
    rec.checkpoint = ckpt_path;
    result.epochs.push_back(rec);

    log << "epoch " << epoch << "/" << o.epochs << ": train_loss " << fmt("%.4f", train_loss)
        << " test_loss " << fmt("%.4f", eval.loss) << " accuracy " << fmt("%.4f", rec.accuracy)
        << " macro_f1 " << fmt("%.4f", macro) << " micro_f1 " << fmt("%.4f", micro) << " ("
        << rec.eval_samples << " test samples) " << fmt("%.0f", rec.samples_per_second)
        << " samples/s" << std::endl;

    // The checkpoint first, then its metrics.jsonl line, so the line never
    // names a file that a failed save did not write; the checkpoint carries
    // the line, and a resume puts it back if a crash came in between.
    state.metrics_line = to_json_line(rec);
    auto ckpt = ddp::worker::make_checkpoint(*model, &optimizer, epoch, state.global_step);
    store_train_state(state, ckpt);
    ddp::worker::save_checkpoint(pg, ckpt_path, ckpt);
    ddp::worker::rank0_decides(pg, [&] {
      append_metrics(metrics_file, rec);
      return std::string();
    });
    log << "saved " << ckpt_path << std::endl;
  }

  log << "training finished: " << state.epochs_done << " epochs, " << state.global_step << " steps"
      << std::endl;
  if (state.best_macro.epoch > 0) {
    log << "best macro f1: " << fmt("%.4f", state.best_macro.value) << " in epoch: " << state.best_macro.epoch
        << ", saved in: " << (fs::path(o.checkpoint_dir) / state.best_macro.checkpoint).string() << std::endl;
    log << "best micro f1: " << fmt("%.4f", state.best_micro.value) << " in epoch: " << state.best_micro.epoch
        << ", saved in: " << (fs::path(o.checkpoint_dir) / state.best_micro.checkpoint).string() << std::endl;
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

}  // namespace ddp::train
