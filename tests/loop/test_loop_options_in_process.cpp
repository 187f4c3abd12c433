// What a language-model trainer expects of the loop, in process
// (loop_fake_task.h): the learning-rate schedules and their resume, gradient
// clipping after the average, accumulation as one larger batch, evaluation
// every N steps, --total_steps, the task's own state in checkpoints, and the
// callbacks' order. Two ranks as threads, well under a second a case.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/loop/callbacks.h"
#include "ddp/loop/lr_schedule.h"
#include "ddp/loop/train_options.h"
#include "ddp/worker/checkpoint.h"
#include "loop_fake_task.h"
#include "test_support.h"
#include "training_runs.h"

using namespace loop_test;
using ddp::test::TempDir;

namespace {

// Every callback event of rank 0, as text ("step 3 lr 0.05", "eval 6
// epoch", "epoch 1"), with the steps' values.
class Recorder : public Callback {
 public:
  void on_step_end(const StepEnd& e) override {
    if (e.rank != 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    events.push_back("step " + std::to_string(e.global_step));
    lrs.push_back(e.learning_rate);
    losses.push_back(e.loss);
    grad_norms.push_back(e.grad_norm);
  }
  void on_eval_end(const EvalEnd& e) override {
    if (e.rank != 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    events.push_back("eval " + std::to_string(e.global_step) + (e.epoch_end ? " epoch" : " mid"));
  }
  void on_epoch_end(int rank, const EpochRecord& r) override {
    if (rank != 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    events.push_back("epoch " + std::to_string(r.epoch));
    // The default callback (metrics.jsonl) came first.
    metrics_lines_at_epoch_end.push_back(lines_of(r.checkpoint.substr(0, r.checkpoint.rfind('/')) + "/metrics.jsonl").size());
  }
  std::vector<std::string> events;
  std::vector<double> lrs, losses, grad_norms;
  std::vector<std::size_t> metrics_lines_at_epoch_end;

 private:
  std::mutex mu_;
};

LoopHooks recording(const std::shared_ptr<Recorder>& r) {
  LoopHooks h;
  h.callbacks.push_back(r);
  return h;
}

void require_all_trained(const std::vector<RankRun>& runs) {
  for (const auto& r : runs) {
    INFO(r.out);
    REQUIRE(r.error.empty());
  }
}

// The weights a run saved with --save_final, as one flat tensor.
at::Tensor weights_of(const std::string& path) {
  const auto w = ddp::worker::load_weights(path);
  return torch::cat({w.find("weight")->flatten(), w.find("bias")->flatten()});
}

// Hooks that stop every rank before global step `at`, as a killed job stops.
LoopHooks stop_before(std::int64_t at) {
  LoopHooks h;
  h.before_step = [at](int, std::int64_t step, int) {
    if (step == at) throw std::runtime_error("stopped");
  };
  return h;
}

// The resumed run stepped at the uninterrupted run's rates from its step
// `from` on, and ended with its weights, bit for bit.
void check_resume_continues(const Recorder& plain, const Recorder& resumed, std::size_t from,
                            const std::string& plain_weights, const std::string& resumed_weights) {
  REQUIRE(resumed.lrs.size() + from == plain.lrs.size());
  for (std::size_t i = 0; i < resumed.lrs.size(); ++i) CHECK(resumed.lrs[i] == plain.lrs[i + from]);
  CHECK(torch::equal(weights_of(resumed_weights), weights_of(plain_weights)));
}

double cosine_lr(double peak, std::int64_t warmup, std::int64_t total, std::int64_t s) {
  if (s < warmup) return peak * static_cast<double>(s) / static_cast<double>(warmup);
  return peak * 0.5 * (1 + std::cos(M_PI * static_cast<double>(s - warmup) / static_cast<double>(total - warmup)));
}

}  // namespace

TEST_CASE("schedules: warm-up then cosine gives Hugging Face's values, plateau reduces after its patience",
          "[loop][schedule]") {
  TrainOptions o;
  o.lr_schedule = "cosine";
  o.warmup_steps = 4;
  const auto cosine = make_schedule_from_options({o, 5, 20, "macro_f1", true});
  CHECK(cosine->name() == "cosine");
  const double peak = o.learning_rate;
  CHECK(cosine->at_step(0, peak) == 0);
  CHECK(cosine->at_step(2, peak) == Approx(peak / 2));
  CHECK(cosine->at_step(4, peak) == Approx(peak));
  CHECK(cosine->at_step(12, peak) == Approx(peak / 2));
  CHECK(cosine->at_step(20, peak) == Approx(0).margin(1e-15));
  CHECK(cosine->at_step(25, peak) == Approx(0).margin(1e-15));  // past the end: stays at 0
  std::string note;
  CHECK(cosine->at_epoch_end(0.1, 0.5, note) == 0.5);
  CHECK(note.empty());

  TrainOptions p;
  p.lr_patience = 1;
  const auto plateau = make_schedule_from_options({p, 5, 20, "macro_f1", true});
  CHECK(plateau->name() == "plateau");
  CHECK(plateau->at_step(3, 0.2) == 0.2);
  CHECK(plateau->at_epoch_end(0.5, 0.2, note) == 0.2);
  CHECK(plateau->at_epoch_end(0.5, 0.2, note) == 0.2);
  CHECK(note.empty());
  CHECK(plateau->at_epoch_end(0.5, 0.2, note) == Approx(0.02));
  CHECK(note == "ReduceLROnPlateau: macro_f1 did not improve for 2 epochs; learning rate 0.2 -> 0.02");
  // Its state is the plateau's, under the keys it always had.
  TrainState s;
  plateau->save(s);
  CHECK(s.plateau.best == 0.5);
  CHECK(s.schedule_name.empty());
}

TEST_CASE("in-process: a cosine run steps the rate per step, and a resume mid-epoch continues the curve bit for bit",
          "[loop][in-process][schedule]") {
  TempDir tmp;
  auto plain = options(tmp.file("plain"), 3);
  plain.lr_schedule = "cosine";
  plain.warmup_steps = 5;
  plain.save_final = tmp.file("plain.pt");
  const auto rec = std::make_shared<Recorder>();
  const auto runs = train(plain, false, recording(rec));
  require_all_trained(runs);
  CHECK_THAT(runs[0].out, Catch::Contains("; lr schedule cosine over 18 steps (warm-up 5)"));
  REQUIRE(rec->lrs.size() == 18);
  for (std::int64_t s = 0; s < 18; ++s) CHECK(rec->lrs[static_cast<std::size_t>(s)] == Approx(cosine_lr(0.05, 5, 18, s)));

  // Stopped before global step 10 (epoch 2, step 4) with a step checkpoint
  // at 8, resumed with another --learning_rate: the peak is the checkpoint's.
  auto killed = options(tmp.file("killed"), 3);
  killed.lr_schedule = "cosine";
  killed.warmup_steps = 5;
  killed.checkpoint_every_steps = 4;
  killed.save_final = tmp.file("killed.pt");
  for (const auto& r : train(killed, false, stop_before(10))) REQUIRE(r.error == "stopped");
  killed.resume = true;
  killed.learning_rate = 0.5;
  const auto rec2 = std::make_shared<Recorder>();
  const auto resumed = train(killed, false, recording(rec2));
  require_all_trained(resumed);
  CHECK_THAT(resumed[0].out, Catch::Contains("continuing epoch 2 after its step 2"));
  check_resume_continues(*rec, *rec2, 8, tmp.file("plain.pt"), tmp.file("killed.pt"));
}

TEST_CASE("in-process: the plateau's state resumes from a step checkpoint of the first epoch, 'lower is better' too",
          "[loop][in-process][schedule]") {
  // Patience 0: an epoch that does not improve halves the rate. A resume
  // that started the plateau's best at -inf (its state before the first
  // epoch's end) would call the regression's first epoch bad and halve it.
  TempDir tmp;
  const auto run = [&](const std::string& name, const LoopHooks& hooks, bool resume) {
    auto o = options(tmp.file(name), 3);
    o.lr_patience = 0;
    o.lr_factor = 0.5;
    o.checkpoint_every_steps = 2;
    o.resume = resume;
    o.save_final = tmp.file(name + ".pt");
    return train(o, /*regression=*/true, hooks);
  };
  const auto rec = std::make_shared<Recorder>();
  require_all_trained(run("plain", recording(rec), false));
  for (const auto& r : run("killed", stop_before(3), false)) REQUIRE(r.error == "stopped");
  const auto rec2 = std::make_shared<Recorder>();
  require_all_trained(run("killed", recording(rec2), true));
  check_resume_continues(*rec, *rec2, 2, tmp.file("plain.pt"), tmp.file("killed.pt"));
}

TEST_CASE("in-process: --grad_clip_norm scales the averaged gradient to the norm, in its direction",
          "[loop][in-process][clip]") {
  // Plain SGD, one step: the weights move by lr * the gradient used.
  TempDir tmp;
  FakeTask fresh(false);
  const auto model = fresh.make_model();
  at::Tensor initial = torch::cat({model->named_parameters()["weight"].flatten(), model->named_parameters()["bias"].flatten()}).detach().clone();
  const auto one_step = [&](const std::string& name, double clip, const std::shared_ptr<Recorder>& rec) {
    auto o = options(tmp.file(name), 1);
    o.max_steps = 1;
    o.grad_clip_norm = clip;
    o.save_final = tmp.file(name + ".pt");
    require_all_trained(train_world(2, o, false, recording(rec), [](FakeTask& t) { t.use_sgd(); }));
    return (initial - weights_of(o.save_final)) / o.learning_rate;  // the gradient stepped with
  };
  const auto free_rec = std::make_shared<Recorder>();
  const at::Tensor g = one_step("free", 0, free_rec);
  CHECK(free_rec->grad_norms.at(0) == -1);  // not clipping: no norm computed
  const double norm = g.norm().item<double>();
  REQUIRE(norm > 0.01);

  const auto clipped_rec = std::make_shared<Recorder>();
  const at::Tensor c = one_step("clipped", norm / 4, clipped_rec);
  CHECK(clipped_rec->grad_norms.at(0) == Approx(norm).epsilon(1e-4));  // the norm before clipping
  CHECK(c.norm().item<double>() == Approx(norm / 4).epsilon(1e-3));
  CHECK(torch::allclose(c * 4, g, 1e-3, 1e-5));

  // A norm above the gradient's changes nothing.
  const auto loose_rec = std::make_shared<Recorder>();
  CHECK(torch::allclose(one_step("loose", norm * 2, loose_rec), g, 1e-5, 1e-7));
}

TEST_CASE("in-process: --accumulate_batches N trains as one batch N times larger, a partial last step included",
          "[loop][in-process][accumulate]") {
  // 48 samples a rank: 4 batches of 8 a step gives steps of 32 and 16
  // samples, as batches of 32 do.
  TempDir tmp;
  auto big = options(tmp.file("big"), 2);
  big.batch_size = 32;
  big.save_final = tmp.file("big.pt");
  const auto big_runs = train(big, false);
  require_all_trained(big_runs);

  auto acc = options(tmp.file("acc"), 2);
  acc.accumulate_batches = 4;
  acc.save_final = tmp.file("acc.pt");
  std::int64_t largest[2] = {0, 0};
  std::vector<RankRun> acc_runs(2);
  ddp::worker::run_ranks_in_process(2, [&](const std::shared_ptr<ProcessGroup>& pg) {
    FakeTask task(false);
    std::ostringstream out;
    auto& run = acc_runs[static_cast<std::size_t>(pg->rank())];
    try {
      run.result = run_training(acc, pg, task, out, false);
    } catch (const std::exception& e) {
      run.error = e.what();
    }
    run.out = out.str();
    largest[pg->rank()] = task.largest_batch();
  });
  require_all_trained(acc_runs);
  CHECK_THAT(acc_runs[0].out, Catch::Contains("batch 8 per process x 4 batches a step (64 global), 2 steps per epoch"));
  CHECK(largest[0] == 8);  // forwards of --batch_size, never of the step
  CHECK(acc_runs[0].result.state.global_step == 4);
  CHECK(ddp::test::max_relative_difference(tmp.file("acc.pt"), tmp.file("big.pt")) < 1e-5);
  for (std::size_t e = 0; e < 2; ++e)
    CHECK(acc_runs[0].result.epochs[e].train_loss == Approx(big_runs[0].result.epochs[e].train_loss).epsilon(1e-5));
}

TEST_CASE("in-process: --eval_every_steps evaluates mid-epoch at every Nth global step, the epochs' own as before",
          "[loop][in-process][eval]") {
  TempDir tmp;
  auto o = options(tmp.file("ck"), 2);
  o.eval_every_steps = 4;
  const auto rec = std::make_shared<Recorder>();
  const auto runs = train(o, false, recording(rec));
  require_all_trained(runs);
  std::vector<std::string> evals;
  for (const auto& e : rec->events)
    if (e.rfind("eval", 0) == 0) evals.push_back(e);
  // 6 steps an epoch: 4 and 8 mid-epoch; 12 is the epoch's end, evaluated once.
  CHECK(evals == std::vector<std::string>{"eval 4 mid", "eval 6 epoch", "eval 8 mid", "eval 12 epoch"});
  CHECK_THAT(runs[0].out, Catch::Contains("step 4 (epoch 1, step 4/6): test_loss ") &&
                              Catch::Contains("step 8 (epoch 2, step 2/6): test_loss ") &&
                              !Catch::Contains("step 12 (epoch 2"));
  CHECK(lines_of(tmp.file("ck/metrics.jsonl")).size() == 2);  // one line an epoch, as before
}

TEST_CASE("in-process: --total_steps ends the run mid-epoch, evaluated and checkpointed, --max_steps stays per epoch",
          "[loop][in-process][steps]") {
  TempDir tmp;
  auto o = options(tmp.file("ck"), 5);
  o.total_steps = 8;
  const auto runs = train(o, false);
  require_all_trained(runs);
  CHECK(runs[0].result.state.global_step == 8);
  CHECK(runs[0].result.epochs.size() == 2);
  CHECK(lines_of(tmp.file("ck/metrics.jsonl")).size() == 2);
  CHECK_THAT(runs[0].out, Catch::Contains("training finished: 2 epochs, 8 steps"));
  // Resumed, it has nothing left to do.
  o.resume = true;
  const auto again = train(o, false);
  require_all_trained(again);
  CHECK(again[0].result.epochs.empty());

  const auto opts = [](std::vector<std::string> args) { return parse_train_options(args, [](const char*) { return std::nullopt; }); };
  CHECK(opts({"--max_steps", "3"}).max_steps == 3);
  CHECK(opts({"--max-steps-per-epoch=4"}).max_steps == 4);
  CHECK(opts({"--total_steps", "9"}).total_steps == 9);
  CHECK(opts({"--accumulate_batches", "2", "--grad_clip_norm", "1.5", "--eval_every_steps", "7"}).accumulate_batches == 2);
  CHECK(opts({"--lr_schedule", "cosine", "--warmup_steps", "3"}).warmup_steps == 3);
  CHECK_THROWS_WITH(opts({"--lr_schedule", "linear"}), "--lr_schedule: 'linear' is not a schedule, use plateau or cosine");
  CHECK_THROWS_WITH(opts({"--warmup_steps", "3"}),
                    "--warmup_steps 3 needs --lr_schedule cosine (the plateau schedule has no warm-up)");
  CHECK_THROWS_WITH(opts({"--accumulate_batches", "0"}), Catch::Contains("--accumulate_batches"));
  CHECK_THROWS_WITH(opts({"--grad_clip_norm", "-1"}), Catch::Contains("--grad_clip_norm: -1 is out of range"));
}

TEST_CASE("in-process: the task's own state goes into every checkpoint under task.* and comes back on resume",
          "[loop][in-process][task-state]") {
  TempDir tmp;
  auto o = options(tmp.file("ck"), 3);
  o.checkpoint_every_steps = 4;
  for (const auto& r : train_world(2, o, false, stop_before(10), [](FakeTask& t) { t.keep_state(); }))
    REQUIRE(r.error == "stopped");
  const auto ckpt = ddp::worker::load_checkpoint(tmp.file("ck/epoch_2_step_2.pt"));
  CHECK(ckpt.strings.at("task.vocab") == "a b c");
  CHECK(ckpt.metrics.at("task.forwards") == 8);  // 8 batches of 8 before the checkpoint
  // The classifier's best epochs keep their old keys, now the task's defaults.
  const auto epoch1 = ddp::worker::load_checkpoint(tmp.file("ck/epoch_1.pt"));
  CHECK(epoch1.metrics.count("train.best_macro_f1") == 1);
  CHECK(epoch1.metrics.count("train.best_micro_epoch") == 1);
  CHECK(epoch1.metrics.count("train.best.macro_f1") == 0);

  o.resume = true;
  TaskState loaded[2];
  bool was_loaded[2] = {false, false};
  std::vector<RankRun> resumed(2);
  ddp::worker::run_ranks_in_process(2, [&](const std::shared_ptr<ProcessGroup>& pg) {
    FakeTask task(false);
    task.keep_state();
    std::ostringstream out;
    try {
      resumed[static_cast<std::size_t>(pg->rank())].result = run_training(o, pg, task, out, false);
    } catch (const std::exception& e) {
      resumed[static_cast<std::size_t>(pg->rank())].error = e.what();
    }
    loaded[pg->rank()] = task.loaded_state();
    was_loaded[pg->rank()] = task.state_loaded();
  });
  require_all_trained(resumed);
  for (int r = 0; r < 2; ++r) {
    CHECK(was_loaded[r]);
    CHECK(loaded[r].numbers == std::map<std::string, double>{{"forwards", 8}});
    CHECK(loaded[r].strings == std::map<std::string, std::string>{{"vocab", "a b c"}});
    CHECK(loaded[r].bytes == std::map<std::string, std::string>{{"blob", std::string("\0\1\xff", 3)}});
  }
  // Best epochs round trip under the default keys too (the regression's test_loss).
  TrainState s;
  s.best["test_loss"] = {0.25, 2, "epoch_2.pt"};
  s.best["macro_f1"] = {0.5, 1, "epoch_1.pt"};
  ddp::worker::Checkpoint c;
  const LegacyBestKeys legacy = FakeTask(false).best_keys();
  store_train_state(s, c, legacy);
  CHECK(c.metrics.at("train.best.test_loss") == 0.25);
  CHECK(c.metrics.at("train.best_macro_f1") == 0.5);
  const TrainState back = load_train_state(c, "c", legacy);
  CHECK(back.best.at("test_loss").epoch == 2);
  CHECK(back.best.at("macro_f1").checkpoint == "epoch_1.pt");
}

TEST_CASE("in-process: callbacks hear each step's end, then the evaluation's, then the epoch's, after metrics.jsonl",
          "[loop][in-process][callbacks]") {
  TempDir tmp;
  const auto rec = std::make_shared<Recorder>();
  require_all_trained(train(options(tmp.file("ck"), 2), false, recording(rec)));
  std::vector<std::string> expected;
  for (int e = 1; e <= 2; ++e) {
    for (int s = 1; s <= 6; ++s) expected.push_back("step " + std::to_string((e - 1) * 6 + s));
    expected.push_back("eval " + std::to_string(e * 6) + " epoch");
    expected.push_back("epoch " + std::to_string(e));
  }
  CHECK(rec->events == expected);
  CHECK(rec->metrics_lines_at_epoch_end == std::vector<std::size_t>{1, 2});
  for (const double lr : rec->lrs) CHECK(lr == 0.05);
  for (const double loss : rec->losses) CHECK((std::isfinite(loss) && loss > 0));
}
