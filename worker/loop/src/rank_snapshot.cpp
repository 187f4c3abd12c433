#include "ddp/loop/rank_snapshot.h"

#include <torch/torch.h>

#include <ATen/Context.h>

#include <cstring>
#include <mutex>

#include "ddp/worker/process_group.h"

namespace ddp::loop {
namespace {

std::string state_bytes(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  const at::Tensor t = gen.get_state().contiguous();
  return std::string(static_cast<const char*>(t.data_ptr()), static_cast<std::size_t>(t.numel()));
}

void set_state_bytes(at::Generator gen, const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
}

// Every rank's `mine`, by rank. The states have one size per generator
// type, so one all-gather of equal sizes does.
std::vector<std::string> gather_bytes(ddp::worker::ProcessGroup& pg, const std::string& mine) {
  at::Tensor t = at::empty({static_cast<std::int64_t>(mine.size())}, at::kByte);
  std::memcpy(t.data_ptr(), mine.data(), mine.size());
  std::vector<std::string> all;
  for (const at::Tensor& g : pg.all_gather(t.to(pg.device()))) {
    const at::Tensor c = g.cpu().contiguous();
    all.emplace_back(static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel()));
  }
  return all;
}

}  // namespace

void capture_rng(ddp::worker::ProcessGroup& pg, TrainState& s) {
  s.cpu_rng = gather_bytes(pg, state_bytes(at::detail::getDefaultCPUGenerator()));
  s.device_rng.clear();
  if (!pg.device().is_cpu())
    s.device_rng = gather_bytes(pg, state_bytes(at::globalContext().defaultGenerator(pg.device())));
}

ddp::worker::Checkpoint make_snapshot(const TrainState& s, const torch::nn::Module& model,
                                      torch::optim::Optimizer& optimizer, const LegacyBestKeys& legacy) {
  auto c = ddp::worker::make_checkpoint(model, &optimizer, s.epochs_done, s.global_step);
  store_train_state(s, c, legacy);
  return c;
}

TrainState restore_snapshot(const ddp::worker::Checkpoint& c, const std::string& what, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, int rank, int world_size, c10::Device device,
                            const LegacyBestKeys& legacy) {
  TrainState s = load_train_state(c, what, legacy);
  const auto r = static_cast<std::size_t>(rank);
  const bool own = s.cpu_rng.size() == static_cast<std::size_t>(world_size) && r < s.cpu_rng.size();
  ddp::worker::apply_checkpoint(c, model, &optimizer, /*restore_rng=*/!own);
  if (own) set_state_bytes(at::detail::getDefaultCPUGenerator(), s.cpu_rng[r]);
  if (!device.is_cpu() && s.device_rng.size() == static_cast<std::size_t>(world_size))
    set_state_bytes(at::globalContext().defaultGenerator(device), s.device_rng[r]);
  return s;
}

std::string snapshot_to_bytes(const TrainState& s, const torch::nn::Module& model,
                              torch::optim::Optimizer& optimizer, const LegacyBestKeys& legacy) {
  return ddp::worker::checkpoint_to_bytes(make_snapshot(s, model, optimizer, legacy));
}

TrainState restore_snapshot_bytes(const std::string& bytes, const std::string& what, torch::nn::Module& model,
                                  torch::optim::Optimizer& optimizer, int rank, int world_size, c10::Device device,
                                  const LegacyBestKeys& legacy) {
  return restore_snapshot(ddp::worker::checkpoint_from_bytes(bytes, what, device), what, model, optimizer, rank,
                          world_size, device, legacy);
}

}  // namespace ddp::loop
