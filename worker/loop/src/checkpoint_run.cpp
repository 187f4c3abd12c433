#include "checkpoint_run.h"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "format.h"
#include "ddp/common/atomic_file.h"
#include "ddp/loop/checkpoint_files.h"
#include "ddp/loop/metrics_log.h"
#include "ddp/loop/run_identity.h"
#include "ddp/loop/train_state.h"
#include "ddp/worker/checkpoint.h"
#include "ddp/worker/collectives.h"
#include "ddp/worker/process_group.h"

namespace ddp::loop {
namespace {

namespace fs = std::filesystem;

// Writes and removes a probe file in `dir`; throws AtomicWriteError.
void probe_writable(const fs::path& dir, const std::string& name) {
  const std::string probe = (dir / name).string();
  ddp::write_file_atomically(probe, "the training loop checks that it can write here\n");
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
    probe_writable(parent, ".ddp-loop-save-final-test");
  } catch (const ddp::AtomicWriteError& e) {
    throw std::runtime_error("--save_final '" + path + "': the directory '" + parent.string() + "' is not writable (" +
                             e.what() + "); pass another --save_final");
  }
}

}  // namespace

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
    // The lock comes first: the probe's files are ones a run holding the
    // lock removes as a dead writer's (remove_stale_temp_files).
    lock = std::make_unique<CheckpointDirLock>(dir);
    try {
      probe_writable(dir, "ddp-loop-write-test");
    } catch (const ddp::AtomicWriteError& e) {
      throw std::runtime_error("checkpoint directory '" + dir + "' is not writable (" + e.what() +
                               "); pass a writable --checkpoint_dir");
    }
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

namespace {

bool launches_overlap(const std::string& a, const std::string& b) {
  std::set<std::string> in_a;
  std::istringstream sa(a), sb(b);
  for (std::string l; std::getline(sa, l);) in_a.insert(l);
  for (std::string l; std::getline(sb, l);)
    if (in_a.count(l)) return true;
  return false;
}

}  // namespace

// Rank 0 picks the checkpoint to resume and tells the others, so all ranks
// load the same file even if one appears while they look. The newest file,
// an epoch's or a step's (checkpoint_files.h), that reads back wins (a
// damaged one is skipped with a warning); it
// must belong to this run: after a restart a checkpoint of another launch
// (`launches`: this job's, gather_launches) or with other options
// (run_identity.h) is another run's and is refused, while an explicit
// --resume continues it with a note naming the value in effect of each
// changed option. Also drops metrics.jsonl lines of the epochs that will be
// replayed, and puts back the chosen epoch's line when a crash came between
// its checkpoint and its line. Returns the path ("": none, start from
// epoch 1).
std::string choose_resume_checkpoint(const TrainOptions& o, ddp::worker::ProcessGroup& pg,
                                     const std::string& launches, std::ostream& log) {
  return ddp::worker::rank0_decides(pg, [&]() -> std::string {
    const RunIdentity ours = run_identity(o);
    std::vector<std::string> damaged;
    std::string chosen;
    int chosen_done = 0;  // its finished epochs
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
            (saved.run_identity.empty() ? "does not record its run's options (written by an older version of the training loop)"
                                        : "was written with other options: " + describe_changes(changes)) +
            ", so it belongs to another run; a restarted run resumes only its own "
            "checkpoints. Move the other run's files away or use another --checkpoint_dir "
            "(--resume continues it on purpose)");
      if (!changes.empty())
        log << "note: resuming '" << found.path << "', "
            << (saved.run_identity.empty()
                    ? "which does not record its run's options (written by an older version of the training loop); continuing with "
                      "this run's options and the checkpoint's learning rate " + fmt("%g", saved.learning_rate)
                    : "written with other options; in effect from here: " +
                          describe_resume_effect(changes, saved.learning_rate))
            << std::endl;
      chosen = found.path;
      chosen_done = saved.epochs_done;
      chosen_state = saved;
      break;
    }
    if (chosen.empty() && !damaged.empty()) {
      std::string list;
      for (const auto& d : damaged) list += (list.empty() ? "" : ", ") + d;
      throw std::runtime_error("no readable checkpoint in '" + o.checkpoint_dir + "' (damaged: " + list +
                               "); remove them to start from epoch 1, or restore a copy");
    }
    truncate_metrics_after(metrics_path(o.checkpoint_dir), chosen_done);
    // A step checkpoint carries its last finished epoch's line too.
    if (chosen_done > 0 && !chosen_state.metrics_line.empty() &&
        restore_metrics_line(metrics_path(o.checkpoint_dir), chosen_done, chosen_state.metrics_line))
      log << "note: metrics.jsonl had no line for epoch " << chosen_done << " (stopped between its checkpoint and its "
          << "line); put back the one saved in the checkpoint" << std::endl;
    return chosen;
  });
}

}  // namespace ddp::loop
