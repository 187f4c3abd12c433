#include "in_place_recovery.h"

#include <torch/torch.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
    : pg_(pg), model_(model), optimizer_(optimizer), on_(ddp::worker::recovery_possible(pg)) {
  // A returning rank says it can recover only once it is back (step_started).
  if (on_ && ddp::worker::recovery_generation_at_start() == 0) {
    ddp::worker::advertise_recovery(pg_, true);
    advertised_ = true;
  }
}

void InPlaceRecovery::step_started(int epoch, std::int64_t step, const TrainState& state, const EpochSteps& sums) {
  if (!on_) return;
  if (!advertised_) {
    ddp::worker::advertise_recovery(pg_, true);
    advertised_ = true;
  }
  std::swap(previous_, current_);
  TrainState s = state;
  // The generators travel as the snapshot's own (this rank's, now), not as
  // the per-rank states of the last epoch's checkpoint.
  s.cpu_rng.clear();
  s.device_rng.clear();
  current_.global_step = state.global_step;
  current_.epoch = epoch;
  current_.step = step;
  current_.sums = sums;
  current_.bytes = snapshot_to_bytes(s, model_, optimizer_);
}

bool InPlaceRecovery::requested(std::chrono::milliseconds wait) const {
  if (!on_) return false;
  const auto until = std::chrono::steady_clock::now() + wait;
  while (ddp::worker::requested_generation(pg_) <= ddp::worker::group_generation(pg_)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

RedoPoint InPlaceRecovery::recover(const std::function<void()>& drop_ddp, const std::function<void()>& make_ddp) {
  drop_ddp();
  ddp::worker::reform_process_group(pg_, ddp::worker::requested_generation(pg_));
  RedoPoint p = meet(&current_);
  make_ddp();
  return p;
}

RedoPoint InPlaceRecovery::join() {
  RedoPoint p = meet(nullptr);
  return p;
}

RedoPoint InPlaceRecovery::meet(const Kept* mine) {
  const int rank = pg_.rank();
  const int world = pg_.world_size();
  const bool survivor = mine != nullptr && mine->global_step >= 0;
  const std::string key = "redo_" + std::to_string(ddp::worker::group_generation(pg_));
  const std::vector<std::string> all = ddp::worker::exchange_through_store(
      pg_, key,
      survivor ? std::to_string(current_.global_step) + " " + std::to_string(previous_.global_step) : "new");
  // The earliest step a survivor started; every survivor holds it, as its
  // current or its previous step's start.
  long long redo = LLONG_MAX;
  int donor = -1;
  std::vector<std::pair<long long, long long>> kept(static_cast<std::size_t>(world), {-1, -1});
  for (int r = 0; r < world; ++r) {
    if (all[static_cast<std::size_t>(r)] == "new") continue;
    std::istringstream in(all[static_cast<std::size_t>(r)]);
    in >> kept[static_cast<std::size_t>(r)].first >> kept[static_cast<std::size_t>(r)].second;
    redo = std::min(redo, kept[static_cast<std::size_t>(r)].first);
    if (donor < 0) donor = r;
  }
  if (donor < 0) throw std::runtime_error("in-place recovery: no rank kept its state; the group must restart");
  for (int r = 0; r < world; ++r) {
    const auto& k = kept[static_cast<std::size_t>(r)];
    if (all[static_cast<std::size_t>(r)] != "new" && k.first != redo && k.second != redo)
      throw std::runtime_error("in-place recovery: rank " + std::to_string(r) + " kept steps " +
                               std::to_string(k.second) + " and " + std::to_string(k.first) + ", not step " +
                               std::to_string(redo) + " that another survivor redoes; the group must restart");
  }
  const Kept* use = survivor ? (current_.global_step == redo ? &current_ : &previous_) : nullptr;

  // The donor's copy to every rank (the survivors receive and keep their own).
  std::string payload;
  if (rank == donor) payload = redo_header(use->epoch, use->step, use->sums) + use->bytes;
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(payload.size()), at::TensorOptions().dtype(at::kLong));
  pg_.broadcast(length, donor);
  at::Tensor data = at::empty({length.item<std::int64_t>()}, at::kByte);
  if (rank == donor) std::memcpy(data.data_ptr(), payload.data(), payload.size());
  pg_.broadcast(data, donor);

  RedoPoint p;
  const std::string what = "the state from rank " + std::to_string(donor);
  if (use != nullptr) {
    p.state = restore_snapshot_bytes(use->bytes, what, model_, optimizer_, rank, world, pg_.device());
    p.sums = use->sums;
    p.epoch = use->epoch;
    p.step = use->step;
  } else {
    const std::string got(static_cast<const char*>(data.data_ptr()), static_cast<std::size_t>(data.numel()));
    const auto nl = got.find('\n');
    if (nl == std::string::npos) throw std::runtime_error("in-place recovery: " + what + " has no header");
    std::istringstream in(got.substr(0, nl));
    std::string loss, seconds;
    long long step = 0, local = 0, resumed = 0;
    in >> p.epoch >> step >> loss >> local >> resumed >> seconds;
    p.step = step;
    // Its own sums died with it: the donor's stand in (the recovered
    // epoch's train_loss line may differ; the weights do not).
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
