// Step checkpoints and mid-epoch resume at loop level, in process
// (loop_fake_task.h): a run stopped mid-epoch and resumed from its newest
// step checkpoint ends with the uninterrupted run's weights bit for bit (2
// ranks; and 1 rank whose inputs draw from LibTorch's generator, so the
// generator must continue too), only the newest step checkpoint is kept,
// and one rank's whole state goes to bytes and back (what a rank sends a
// respawned one), older checkpoints included.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "ddp/loop/checkpoint_files.h"
#include "ddp/loop/rank_snapshot.h"
#include "ddp/loop/train_state.h"
#include "ddp/worker/checkpoint.h"
#include "loop_fake_task.h"
#include "test_support.h"
#include "training_runs.h"

using namespace loop_test;
using ddp::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Whether two weights files hold the same tensors, bit for bit.
bool same_weights_bitwise(const std::string& a, const std::string& b) {
  const auto wa = ddp::worker::load_weights(a), wb = ddp::worker::load_weights(b);
  if (wa.size() != wb.size()) return false;
  for (const auto& item : wa) {
    const at::Tensor* other = wb.find(item.key());
    if (!other || !torch::equal(item.value(), *other)) return false;
  }
  return true;
}

std::set<std::string> checkpoint_file_names(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& f : list_checkpoints(dir)) names.insert(fs::path(f.path).filename().string());
  return names;
}

// A metrics.jsonl line up to the fields that are wall time.
std::string line_without_times(const std::string& line) { return line.substr(0, line.find("\"train_seconds\"")); }

void require_ranks_trained(const std::vector<RankRun>& runs) {
  for (const auto& r : runs) {
    INFO(r.out);
    REQUIRE(r.error.empty());
  }
}

// Trains `world` ranks for 3 epochs uninterrupted, then again with a step
// checkpoint every `every` steps, stopped before global step `stop_at` and
// resumed; checks the resume's line and returns whether the weights match.
struct StopAndResume {
  int world = 2;
  std::int64_t every = 4;
  std::int64_t stop_at = 17;
  std::function<void(FakeTask&)> setup;
};

bool stopped_and_resumed_matches(const StopAndResume& c, const std::string& resumed_line) {
  TempDir tmp;
  auto plain = options(tmp.file("plain"), 3);
  plain.save_final = tmp.file("plain.pt");
  require_ranks_trained(train_world(c.world, plain, false, {}, c.setup));

  auto killed = options(tmp.file("killed"), 3);
  killed.save_final = tmp.file("killed.pt");
  killed.checkpoint_every_steps = c.every;
  LoopHooks stop;
  const std::int64_t at = c.stop_at;
  stop.before_step = [at](int, std::int64_t step, int) {
    if (step == at) throw std::runtime_error("stopped");
  };
  for (const auto& r : train_world(c.world, killed, false, stop, c.setup)) REQUIRE(r.error == "stopped");
  killed.resume = true;
  const auto resumed = train_world(c.world, killed, false, {}, c.setup);
  require_ranks_trained(resumed);
  CHECK_THAT(resumed[0].out, Catch::Contains("resumed from " + tmp.file("killed/" + resumed_line)));
  // Each epoch's line as the uninterrupted run's; the resumed epoch's loss
  // adds the skipped steps' sum in another order (rounding only).
  const auto a = lines_of(tmp.file("plain/metrics.jsonl")), b = lines_of(tmp.file("killed/metrics.jsonl"));
  REQUIRE(b.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(ddp::test::json_number(b[i], "train_loss") == Approx(ddp::test::json_number(a[i], "train_loss")).epsilon(1e-12));
    CHECK(ddp::test::json_number(b[i], "train_samples") == ddp::test::json_number(a[i], "train_samples"));
    const auto cut = [](const std::string& l) { return line_without_times(l).substr(l.find("\"test_loss\"")); };
    CHECK(cut(b[i]) == cut(a[i]));
  }
  // The epoch's checkpoint replaced the step checkpoints.
  CHECK(checkpoint_file_names(tmp.file("killed")) == std::set<std::string>{"epoch_1.pt", "epoch_2.pt", "epoch_3.pt"});
  return same_weights_bitwise(tmp.file("killed.pt"), tmp.file("plain.pt"));
}

}  // namespace

TEST_CASE("step checkpoints: 2 ranks stopped mid-epoch resume from the newest step checkpoint to the uninterrupted "
          "run's weights, bit for bit",
          "[loop][in-process][resume][step-checkpoint]") {
  // 6 steps an epoch; checkpoints at global steps 4, 8 and 16 (12 ends
  // epoch 2, whose own checkpoint follows); stopped before step 18.
  StopAndResume c;
  c.stop_at = 17;
  CHECK(stopped_and_resumed_matches(c, "epoch_3_step_4.pt (epoch 2, step 16, restart 0); continuing epoch 3 after "
                                       "its step 4"));
}

TEST_CASE("step checkpoints: 1 rank drawing from LibTorch's generator resumes mid-epoch with the generator's state, "
          "bit for bit",
          "[loop][in-process][resume][step-checkpoint]") {
  // 12 steps an epoch; checkpoints every 5 steps, the newest before the
  // stop at 20 (epoch 2, step 8).
  StopAndResume c;
  c.world = 1;
  c.every = 5;
  c.stop_at = 23;
  c.setup = [](FakeTask& t) { t.add_noise(); };
  CHECK(stopped_and_resumed_matches(c, "epoch_2_step_8.pt (epoch 1, step 20, restart 0); continuing epoch 2 after "
                                       "its step 8"));
}

TEST_CASE("step checkpoints: only the newest is kept, a fresh run refuses it, a resume in epoch 1 continues it",
          "[loop][in-process][resume][step-checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ck");
  auto o = options(dir, 2);
  o.checkpoint_every_steps = 2;
  LoopHooks stop;
  stop.before_step = [](int, std::int64_t step, int) {
    if (step == 5) throw std::runtime_error("stopped");
  };
  for (const auto& r : train(o, false, stop)) REQUIRE(r.error == "stopped");
  CHECK(checkpoint_file_names(dir) == std::set<std::string>{"epoch_1_step_4.pt"});
  CHECK(lines_of(dir + "/metrics.jsonl").empty());

  auto fresh = o;
  const auto refused = train(fresh, false);
  CHECK_THAT(refused[0].error, Catch::Contains("checkpoint directory '" + dir +
                                               "' already holds an earlier run's epoch_1_step_4.pt;"));

  o.resume = true;
  const auto resumed = train(o, false);
  require_ranks_trained(resumed);
  CHECK_THAT(resumed[0].out, Catch::Contains("resumed from " + dir + "/epoch_1_step_4.pt (epoch 0, step 4, restart "
                                             "0); continuing epoch 1 after its step 4"));
  CHECK(lines_of(dir + "/metrics.jsonl").size() == 2);
  CHECK(checkpoint_file_names(dir) == std::set<std::string>{"epoch_1.pt", "epoch_2.pt"});
}

TEST_CASE("rank snapshot: one rank's whole state to bytes and back, its own generator, and older checkpoints",
          "[loop][step-checkpoint]") {
  torch::manual_seed(1);
  torch::nn::Linear model(3, 2);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(0.01));
  opt.zero_grad();
  model(torch::randn({4, 3})).sum().backward();
  opt.step();

  TrainState s;
  s.epochs_done = 2;
  s.global_step = 17;
  s.learning_rate = 0.005;
  s.plateau.best = 0.7;
  s.plateau.num_bad_epochs = 1;
  s.best["macro_f1"] = {0.7, 2, "epoch_2.pt"};
  s.world_size = 2;
  s.batch_size = 8;
  s.run_identity = "seed=5";
  s.metrics_line = "{\"epoch\": 2}";
  s.epoch_steps_done = 5;
  s.epoch_loss_sum = 3.25;
  s.epoch_samples = 80;
  s.epoch_seconds = 1.5;
  // Rank 1's generator state: a generator that drew something.
  torch::manual_seed(77);
  torch::rand({3});
  const at::Tensor rank1_next = torch::rand({4});
  torch::manual_seed(77);
  torch::rand({3});
  s.cpu_rng = {std::string(), std::string()};
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    const at::Tensor st = gen.get_state();
    s.cpu_rng[1].assign(static_cast<const char*>(st.data_ptr()), static_cast<std::size_t>(st.numel()));
    s.cpu_rng[0] = s.cpu_rng[1];
    s.cpu_rng[0][100] ^= 1;  // another state for rank 0
  }
  const std::string bytes = snapshot_to_bytes(s, *model, opt);

  torch::manual_seed(2);
  torch::nn::Linear other(3, 2);
  torch::optim::Adam other_opt(other->parameters(), torch::optim::AdamOptions(0.01));
  const TrainState back = restore_snapshot_bytes(bytes, "the state from rank 0", *other, other_opt, /*rank=*/1,
                                                 /*world_size=*/2, c10::Device("cpu"));
  CHECK(torch::equal(torch::rand({4}), rank1_next));  // rank 1's own generator
  CHECK(torch::equal(other->weight, model->weight));
  CHECK(torch::equal(other->bias, model->bias));
  CHECK(back.epochs_done == 2);
  CHECK(back.global_step == 17);
  CHECK(back.learning_rate == 0.005);
  CHECK(back.plateau.best == 0.7);
  CHECK(back.plateau.num_bad_epochs == 1);
  CHECK(back.best.at("macro_f1").epoch == 2);
  CHECK(back.best.at("macro_f1").checkpoint == "epoch_2.pt");
  CHECK(back.run_identity == "seed=5");
  CHECK(back.metrics_line == s.metrics_line);
  CHECK(back.epoch_steps_done == 5);
  CHECK(back.epoch_loss_sum == 3.25);
  CHECK(back.epoch_samples == 80);
  CHECK(back.epoch_seconds == 1.5);
  CHECK(back.cpu_rng == s.cpu_rng);
  // The optimizer's state: one more equal step gives equal weights.
  for (auto* m : {&model, &other}) {
    auto& o = m == &model ? opt : other_opt;
    o.zero_grad();
    (*m)(torch::ones({2, 3})).sum().backward();
    o.step();
  }
  CHECK(torch::equal(other->weight, model->weight));

  // A checkpoint of a loop before step checkpoints: no position, no
  // per-rank generators (every rank takes its rng_state, rank 0's).
  auto old = ddp::worker::checkpoint_from_bytes(bytes, "x");
  old.tensors.clear();
  for (const char* key : {"train.epoch_steps_done", "train.epoch_loss_sum", "train.epoch_samples", "train.epoch_seconds"})
    old.metrics.erase(key);
  torch::manual_seed(9);
  const at::Tensor after_rng_state = torch::rand({4});
  old.rng_state = [] {
    torch::manual_seed(9);
    return at::detail::getDefaultCPUGenerator().get_state();
  }();
  torch::manual_seed(123);
  const TrainState legacy = restore_snapshot(old, "old.pt", *other, other_opt, 1, 2, c10::Device("cpu"));
  CHECK(legacy.epoch_steps_done == 0);
  CHECK(legacy.cpu_rng.empty());
  CHECK(legacy.global_step == 17);
  CHECK(torch::equal(torch::rand({4}), after_rng_state));

  std::string damaged = bytes;
  damaged[damaged.size() / 3] ^= 1;
  CHECK_THROWS_WITH(restore_snapshot_bytes(damaged, "the state from rank 0", *other, other_opt, 1, 2, c10::Device("cpu")),
                    Catch::Contains("checkpoint 'the state from rank 0' is corrupt"));
}
