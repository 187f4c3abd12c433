// The training loop's shared scenarios at loop level, in process: two ranks
// as threads over an in-memory store (ddp/worker/in_process.h) train tiny
// fake tasks with run_training, so what every program on the loop gets (the
// default classifier's metrics, a task's own loss and "lower is better",
// metrics.jsonl, resume to the uninterrupted weights, the directory's lock,
// the non-finite-loss stop) is tested once, in about a second a case,
// without a launcher or a data set. The programs' own end-to-end cases
// (tests/train, tests/text) keep what needs their real binaries and data.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "batch_halves.h"
#include "ddp/loop/checkpoint_dir_lock.h"
#include "ddp/loop/trainer.h"
#include "ddp/loop/training_task.h"
#include "ddp/worker/checkpoint.h"
#include "ddp/worker/fused_adam.h"
#include "ddp/worker/in_process.h"
#include "ddp/worker/process_group.h"
#include "loop_fake_task.h"
#include "test_support.h"
#include "training_runs.h"

using namespace loop_test;
using ddp::test::TempDir;

TEST_CASE("in-process: 2 ranks train the default classifier, with its metrics, best lines and one metrics line an epoch",
          "[loop][in-process]") {
  TempDir tmp;
  const auto runs = train(options(tmp.file("ck"), 3), /*regression=*/false);
  for (const auto& r : runs) REQUIRE(r.error.empty());
  const std::string& out = runs[0].out;
  INFO(out);
  CHECK(runs[1].out.empty());  // only rank 0 prints
  CHECK_THAT(out, Catch::Contains("loop-test: world size 2, batch 8 per process (16 global), 6 steps per epoch"));
  CHECK_THAT(out, Catch::Contains(" accuracy ") && Catch::Contains(" macro_f1 ") && Catch::Contains("(40 test samples)"));
  CHECK_THAT(out, Catch::Contains("best macro f1: ") && Catch::Contains("best micro f1: "));
  const auto lines = lines_of(tmp.file("ck/metrics.jsonl"));
  REQUIRE(lines.size() == 3);
  for (int e = 0; e < 3; ++e) {
    CHECK_THAT(lines[e], Catch::StartsWith("{\"epoch\": " + std::to_string(e + 1) + ", "));
    CHECK_THAT(lines[e], Catch::Contains("\"accuracy\": ") && Catch::Contains("\"micro_f1\": ") &&
                             Catch::Contains("\"eval_samples\": 40") && Catch::Contains("\"world_size\": 2"));
  }
  // Both ranks end in the same state.
  CHECK(runs[0].result.state.global_step == 18);
  CHECK(runs[1].result.state.global_step == 18);
  CHECK(runs[0].result.epochs.back().test_loss == runs[1].result.epochs.back().test_loss);
}

TEST_CASE("in-process: a task's own loss, metric and 'lower is better' drive the best epoch", "[loop][in-process]") {
  TempDir tmp;
  const auto runs = train(options(tmp.file("ck"), 4), /*regression=*/true);
  REQUIRE(runs[0].error.empty());
  const std::string& out = runs[0].out;
  INFO(out);
  const auto& epochs = runs[0].result.epochs;
  REQUIRE(epochs.size() == 4);
  int best = 1;
  for (int e = 1; e <= 4; ++e)
    if (epochs[e - 1].test_loss < epochs[best - 1].test_loss) best = e;
  CHECK(epochs.back().test_loss < epochs.front().test_loss);
  CHECK(runs[0].result.state.best.at("test_loss").epoch == best);
  CHECK_THAT(out, Catch::Contains("best test loss: ") &&
                      Catch::Contains("in epoch: " + std::to_string(best) + ", saved in: " + tmp.file("ck") +
                                      "/epoch_" + std::to_string(best) + ".pt"));
  CHECK_THAT(out, Catch::Contains(" mae ") && !Catch::Contains("f1") && !Catch::Contains("accuracy"));
  CHECK_THAT(lines_of(tmp.file("ck/metrics.jsonl"))[0], Catch::Contains("\"mae\": "));
}

TEST_CASE("in-process: a run stopped mid-epoch and resumed ends with the uninterrupted run's weights", "[loop][in-process]") {
  TempDir tmp;
  auto plain = options(tmp.file("plain"), 3);
  plain.save_final = tmp.file("plain.pt");
  for (const auto& r : train(plain, false)) REQUIRE(r.error.empty());

  // Both ranks stop before global step 14 (epoch 3, step 3), as a killed
  // job's ranks all stop, then the run is resumed.
  auto killed = options(tmp.file("killed"), 3);
  killed.save_final = tmp.file("killed.pt");
  LoopHooks stop;
  stop.before_step = [](int, std::int64_t step, int) {
    if (step == 14) throw std::runtime_error("stopped at step 14");
  };
  for (const auto& r : train(killed, false, stop)) REQUIRE(r.error == "stopped at step 14");
  CHECK(lines_of(tmp.file("killed/metrics.jsonl")).size() == 2);
  killed.resume = true;
  const auto resumed = train(killed, false);
  REQUIRE(resumed[0].error.empty());
  CHECK_THAT(resumed[0].out, Catch::Contains("resumed from " + tmp.file("killed/epoch_2.pt") + " (epoch 2, step 12"));
  CHECK(ddp::test::max_relative_difference(tmp.file("killed.pt"), tmp.file("plain.pt")) < 1e-6);
  const auto a = lines_of(tmp.file("plain/metrics.jsonl")), b = lines_of(tmp.file("killed/metrics.jsonl"));
  REQUIRE(b.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(b[i].substr(0, b[i].find("\"train_seconds\"")) == a[i].substr(0, a[i].find("\"train_seconds\"")));
}

TEST_CASE("in-process: a checkpoint directory another run holds is refused on every rank, naming the holder",
          "[loop][in-process]") {
  TempDir tmp;
  std::filesystem::create_directories(tmp.file("ck"));
  CheckpointDirLock held(tmp.file("ck"));
  for (const auto& r : train(options(tmp.file("ck"), 1), false))
    CHECK_THAT(r.error, Catch::Contains("checkpoint directory '" + tmp.file("ck") +
                                        "' is in use by another training run (pid ") &&
                            Catch::Contains("wait for it to finish or pass another --checkpoint_dir"));
  CHECK_FALSE(std::filesystem::exists(tmp.file("ck/metrics.jsonl")));
}

TEST_CASE("in-process: a non-finite loss on one rank stops every rank at that step, each naming that rank",
          "[loop][in-process]") {
  TempDir tmp;
  const auto runs = train(options(tmp.file("ck"), 2), false, {}, /*nan_rank=*/1, /*nan_step=*/4);
  // One message naming the rank, the step and the rate (it was a ddp-train
  // launch with --learning_rate 1e20: tests/train/test_resume_safety.cpp).
  CHECK_THAT(runs[1].error, Catch::Contains("training diverged: the loss of rank 1 is nan at epoch 1, step 4 of 6 "
                                            "(global step 4) with learning rate 0.05; every rank stops"));
  CHECK_THAT(runs[0].error, Catch::Contains("the loss of rank 1 is not finite"));
  CHECK(lines_of(tmp.file("ck/metrics.jsonl")).empty());
  // The check runs after backward (its all-reduce right after the
  // gradients'), but before the optimizer's step: no rank applied the NaN.
  CHECK(runs[0].weights_as_at_nan_step);
  CHECK(runs[1].weights_as_at_nan_step);
}

namespace {

struct OneProcessRun {
  RankRun run;
  int replica_forwards = 0;
};

// run_training in a world of one process with `threads` intra-op threads.
OneProcessRun train_one_process(const TrainOptions& o, int threads, bool offer_replica, bool buffer = false,
                                std::int64_t replica_outputs = 0) {
  OneProcessRun r;
  ddp::worker::run_ranks_in_process(1, [&](const std::shared_ptr<ProcessGroup>& pg) {
    at::set_num_threads(threads);
    FakeTask task(/*regression=*/false);
    if (offer_replica) task.offer_replica(buffer, replica_outputs);
    std::ostringstream out;
    try {
      r.run.result = run_training(o, pg, task, out, false);
    } catch (const std::exception& e) {
      r.run.error = e.what();
    }
    r.run.out = out.str();
    r.replica_forwards = task.replica_forwards();
  });
  return r;
}

}  // namespace

TEST_CASE("in-process: one process with 2 threads trains each batch in two halves at once, to the whole batch's weights",
          "[loop][in-process]") {
  TempDir tmp;
  auto whole = options(tmp.file("whole"), 2);
  whole.save_final = tmp.file("whole.pt");
  whole.split_batch = false;
  const auto a = train_one_process(whole, 2, /*offer_replica=*/true);
  REQUIRE(a.run.error.empty());
  CHECK(a.replica_forwards == 0);
  CHECK_THAT(a.run.out, Catch::Contains("2 threads per process, device"));

  auto halves = options(tmp.file("halves"), 2);
  halves.save_final = tmp.file("halves.pt");
  const auto b = train_one_process(halves, 2, true);
  REQUIRE(b.run.error.empty());
  INFO(b.run.out);
  CHECK(b.replica_forwards == 24);  // every step of 2 epochs: 96 samples / batch 8 = 12 a epoch
  CHECK_THAT(b.run.out, Catch::Contains("2 threads per process (each batch in two halves at once, on 1 + 1), device"));
  // The same sums in another order: float32 rounding apart, after 24 steps.
  CHECK(ddp::test::max_relative_difference(tmp.file("halves.pt"), tmp.file("whole.pt")) < 1e-5);
  const auto& ea = a.run.result.epochs, &eb = b.run.result.epochs;
  REQUIRE(ea.size() == 2);
  REQUIRE(eb.size() == 2);
  for (std::size_t e = 0; e < 2; ++e) CHECK(std::abs(eb[e].train_loss - ea[e].train_loss) < 1e-5 * std::abs(ea[e].train_loss) + 1e-7);
  // Split batches the same way each run.
  auto again = options(tmp.file("again"), 2);
  again.save_final = tmp.file("again.pt");
  REQUIRE(train_one_process(again, 2, true).run.error.empty());
  CHECK(ddp::test::max_relative_difference(tmp.file("again.pt"), tmp.file("halves.pt")) == 0);
}

TEST_CASE("in-process: the batch stays whole with one thread, with model buffers, or in a world of two",
          "[loop][in-process]") {
  TempDir tmp;
  CHECK(train_one_process(options(tmp.file("one"), 1), 1, true).replica_forwards == 0);
  CHECK(train_one_process(options(tmp.file("buffers"), 1), 2, true, /*buffer=*/true).replica_forwards == 0);
  std::atomic<int> forwards{0};
  ddp::worker::run_ranks_in_process(2, [&](const std::shared_ptr<ProcessGroup>& pg) {
    at::set_num_threads(2);
    FakeTask task(false);
    task.offer_replica();
    std::ostringstream out;
    run_training(options(tmp.file("two"), 1), pg, task, out, false);
    forwards += task.replica_forwards();
  });
  CHECK(forwards == 0);
}

TEST_CASE("in-process: a replica shaped unlike the model is refused before training, naming the parameter",
          "[loop][in-process]") {
  TempDir tmp;
  const auto r = train_one_process(options(tmp.file("ck"), 1), 2, true, false, /*replica_outputs=*/5);
  CHECK(r.run.error == "make_replica()'s parameter 0 is not shaped as make_model()'s");
  CHECK(r.replica_forwards == 0);
}

TEST_CASE("in-process: a FusedAdam over some of the parameters leaves the loop's zeroing on for the others",
          "[loop][in-process]") {
  // FusedAdam zeroes the gradients it steps with, and the loop then skips
  // its own zeroing; a parameter it does not step (the bias here) must still
  // get one step's gradient, not the sum of all the steps'.
  TempDir tmp;
  at::Tensor bias_grad[2];
  for (const auto which : {FakeTask::WeightOnly::FusedAdam, FakeTask::WeightOnly::Adam}) {
    const int k = which == FakeTask::WeightOnly::Adam;
    const auto o = options(tmp.file("run" + std::to_string(k)), 1);
    ddp::worker::run_ranks_in_process(1, [&](const std::shared_ptr<ProcessGroup>& pg) {
      FakeTask task(false);
      task.step_weight_only(which);
      std::ostringstream out;
      run_training(o, pg, task, out, false);
      bias_grad[k] = task.bias_grad();
    });
  }
  REQUIRE(bias_grad[0].defined());
  REQUIRE(bias_grad[1].defined());
  // The weights differ by float rounding (FusedAdam sums in another order);
  // the sum of 12 steps' gradients would differ by far more.
  INFO("FusedAdam run: " << bias_grad[0] << "Adam run: " << bias_grad[1]);
  CHECK(torch::allclose(bias_grad[0], bias_grad[1], 1e-4, 1e-6));
}

TEST_CASE("batch halves: parallel_for covers a range once, large ones on both threads", "[loop][in-process]") {
  const int saved = at::get_num_threads();
  at::set_num_threads(2);
  FakeTask task(false);
  task.offer_replica();
  const auto model = task.make_model();
  const auto halves = BatchHalves::make_if_useful(task, *model, model->parameters(), 1, torch::kCPU);
  at::set_num_threads(saved);
  REQUIRE(halves);
  for (const std::int64_t n : {0, 1, 65535, 65536, 100001}) {
    INFO("n " << n);
    std::vector<int> hits(static_cast<std::size_t>(n), 0);
    std::mutex mu;
    std::set<std::thread::id> threads;
    halves->parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
    CHECK(std::count(hits.begin(), hits.end(), 1) == n);
    CHECK(threads.size() == (n >= 65536 ? 2u : n > 0 ? 1u : 0u));
  }
}
