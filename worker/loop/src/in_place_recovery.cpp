#include "in_place_recovery.h"

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "ddp/loop/rank_snapshot.h"
#include "ddp/worker/process_group.h"
#include "ddp/worker/recovery.h"

namespace ddp::loop {

namespace {

// The sums and the position that travel in front of the snapshot's bytes,
// floats in hex (%a) so they arrive bit for bit.
std::string redo_header(int epoch, std::int64_t step, const EpochSteps& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d %lld %a %lld %lld %a\n", epoch, static_cast<long long>(step), s.loss_sum,
                static_cast<long long>(s.local_samples), static_cast<long long>(s.resumed_samples), s.seconds);
  return buf;
}

void set_optimizer_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) group.options().set_lr(lr);
}

}  // namespace

InPlaceRecovery::InPlaceRecovery(ddp::worker::ProcessGroup& pg, torch::nn::Module& model,
                                 torch::optim::Optimizer& optimizer)
    : pg_(pg),
      model_(model),
      optimizer_(optimizer),
      on_(ddp::worker::recovery_possible(pg)),
      wait_(on_ ? ddp::worker::recovery_wait() : std::chrono::milliseconds(0)),
      exceptions_at_start_(std::uncaught_exceptions()) {
  // A returning rank says it can recover only once it is back (step_started).
  if (on_ && ddp::worker::recovery_generation_at_start() == 0) {
    ddp::worker::advertise_recovery(pg_, true);
    advertised_ = true;
  }
}

InPlaceRecovery::~InPlaceRecovery() {
  if (!on_ || std::uncaught_exceptions() <= exceptions_at_start_) return;
  ddp::worker::advertise_recovery(pg_, false);
  if (ddp::worker::requested_generation(pg_) > ddp::worker::group_generation(pg_))
    std::cerr << "in-place recovery: rank " << pg_.rank() << " was asked to re-form its group (generation "
              << ddp::worker::requested_generation(pg_)
              << "), but its training loop failed outside a training step (an evaluation, the epoch's end, a "
                 "checkpoint); ddp-launch restarts the group"
              << std::endl;
}

void InPlaceRecovery::step_started(int epoch, std::int64_t step, TrainState& state, const EpochSteps& sums) {
  if (!on_) return;
  if (!advertised_) {
    if (quiet_steps_ > 0) {
      --quiet_steps_;
    } else {
      ddp::worker::advertise_recovery(pg_, true);
      advertised_ = true;
    }
  }
  current_.global_step = state.global_step;
  current_.epoch = epoch;
  current_.step = step;
  // The generators travel as the snapshot's own (this rank's, kept below),
  // not as the per-rank states of the last epoch's checkpoint: those (world
  // x about 5 KB) stay out of the copy, which a step makes.
  state.cpu_rng.swap(rng_aside_);
  state.device_rng.swap(device_rng_aside_);
  current_.state = state;
  state.cpu_rng.swap(rng_aside_);
  state.device_rng.swap(device_rng_aside_);
  current_.sums = sums;
  // Copied into the same tensors every step (allocated once): buffers are
  // small (running statistics), the weights are not copied at all.
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> buffers = model_.buffers();
  if (current_.buffers.size() != buffers.size()) {
    current_.buffers.clear();
    for (const auto& b : buffers) current_.buffers.push_back(b.detach().clone());
  } else {
    for (std::size_t i = 0; i < buffers.size(); ++i) current_.buffers[i].copy_(buffers[i]);
  }
  keep_device_rng();
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  current_.cpu_rng = gen.get_state();
}

// A CUDA rank's generator (dropout on the GPU) at the step's start, as the
// CPU one; through the context's hooks, so no CUDA header is needed.
void InPlaceRecovery::keep_device_rng() {
  if (!pg_.device().is_cuda()) return;
  at::Generator gen = at::globalContext().defaultGenerator(pg_.device());
  std::lock_guard<std::mutex> lock(gen.mutex());
  current_.device_rng = gen.get_state();
}

void InPlaceRecovery::check_interrupted() const {
  if (on_ && ddp::worker::group_interrupted(pg_))
    throw std::runtime_error("in-place recovery: the group was aborted for the launcher's new generation");
}

void InPlaceRecovery::restore_kept() {
  torch::NoGradGuard no_grad;
  const std::vector<at::Tensor> buffers = model_.buffers();
  for (std::size_t i = 0; i < buffers.size() && i < current_.buffers.size(); ++i) buffers[i].copy_(current_.buffers[i]);
  if (current_.device_rng.defined()) {
    at::Generator gen = at::globalContext().defaultGenerator(pg_.device());
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(current_.device_rng);
  }
  if (!current_.cpu_rng.defined()) return;
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(current_.cpu_rng);
}

bool InPlaceRecovery::requested() const {
  if (!on_) return false;
  const auto until = std::chrono::steady_clock::now() + wait_;
  while (ddp::worker::requested_generation(pg_) <= ddp::worker::group_generation(pg_)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

RedoPoint InPlaceRecovery::recover(const std::function<void()>& drop_ddp, const std::function<void()>& make_ddp) {
  // Before anything of the new generation: from here a loss of this rank
  // is no longer one the launcher can add to the recovery.
  ddp::worker::advertise_recovery(pg_, false);
  advertised_ = false;
  quiet_steps_ = 1;
  drop_ddp();
  ddp::worker::reform_process_group(pg_, ddp::worker::requested_generation(pg_));
  RedoPoint p = meet(true);
  make_ddp();
  return p;
}

RedoPoint InPlaceRecovery::join() {
  RedoPoint p = meet(false);
  return p;
}

RedoPoint InPlaceRecovery::meet(bool survivor) {
  const int rank = pg_.rank();
  const int world = pg_.world_size();
  survivor = survivor && current_.global_step >= 0;
  const std::string key = "redo_" + std::to_string(ddp::worker::group_generation(pg_));
  const std::vector<std::string> all = ddp::worker::exchange_through_store(
      pg_, key, survivor ? std::to_string(current_.global_step) : "new");
  // The latest step a survivor started, and the lowest survivor there: it
  // finished the step before with every rank's gradients.
  long long redo = -1;
  int donor = -1;
  for (int r = 0; r < world; ++r) {
    const std::string& v = all[static_cast<std::size_t>(r)];
    if (v == "new") continue;
    const long long g = std::strtoll(v.c_str(), nullptr, 10);
    if (g > redo) {
      redo = g;
      donor = r;
    }
  }
  if (donor < 0) throw std::runtime_error("in-place recovery: no rank kept its state; the group must restart");
  // What the failed step's forward changed, back to its start.
  if (survivor) restore_kept();
  const bool keeps = survivor && current_.global_step == redo;

  // The donor's state to every rank (those at the step keep their own).
  std::string payload;
  if (rank == donor)
    payload = redo_header(current_.epoch, current_.step, current_.sums) +
              snapshot_to_bytes(current_.state, model_, optimizer_);
  // On the group's device (CUDA for NCCL), read back on the CPU.
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(payload.size()), at::TensorOptions().dtype(at::kLong))
                          .to(pg_.device());
  pg_.broadcast(length, donor);
  at::Tensor data = at::empty({length.cpu().item<std::int64_t>()}, at::kByte);
  if (rank == donor) std::memcpy(data.data_ptr(), payload.data(), payload.size());
  data = data.to(pg_.device());
  pg_.broadcast(data, donor);
  data = data.cpu();

  RedoPoint p;
  const std::string what = "the state from rank " + std::to_string(donor);
  if (keeps) {
    p.state = current_.state;
    p.sums = current_.sums;
    p.epoch = current_.epoch;
    p.step = current_.step;
  } else {
    const std::string got(static_cast<const char*>(data.data_ptr()), static_cast<std::size_t>(data.numel()));
    const auto nl = got.find('\n');
    if (nl == std::string::npos) throw std::runtime_error("in-place recovery: " + what + " has no header");
    std::istringstream in(got.substr(0, nl));
    std::string loss, seconds;
    long long step = 0, local = 0, resumed = 0;
    in >> p.epoch >> step >> loss >> local >> resumed >> seconds;
    p.step = step;
    // Its own sums of the epoch died with it (or lack the donor's step):
    // the donor's stand in (the recovered epoch's train_loss line may
    // differ; the weights do not).
    p.sums.loss_sum = std::strtod(loss.c_str(), nullptr);
    p.sums.local_samples = local;
    p.sums.resumed_samples = resumed;
    p.sums.seconds = std::strtod(seconds.c_str(), nullptr);
    p.state = restore_snapshot_bytes(got.substr(nl + 1), what, model_, optimizer_, rank, world, pg_.device());
  }
  set_optimizer_lr(optimizer_, p.state.learning_rate);
  return p;
}

}  // namespace ddp::loop
