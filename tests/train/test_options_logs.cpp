// ddp-train's option parsing (strict, one-line errors, legacy --local_rank),
// metrics.jsonl writing and truncation on resume, and progress formatting.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>

#include "ddp/loop/metrics_log.h"
#include "ddp/loop/progress.h"
#include "ddp/fashion/fashion_options.h"
#include "ddp/loop/train_options.h"
#include "test_support.h"

using namespace ddp::loop;

namespace {
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
std::string usage_error(const std::vector<std::string>& args, const EnvLookup& env = env_of({})) {
  try {
    parse_train_options(args, env);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("options: defaults and every option", "[train][options]") {
  auto d = parse_train_options({}, env_of({}));
  CHECK(d.epochs == 2);
  CHECK(d.batch_size == 64);
  // The loop's own defaults name no program and no data; ddp-train's add both.
  CHECK(d.program == "training");
  CHECK(d.data_dir.empty());
  const auto fashion = parse_train_options({}, env_of({}), ddp::fashion::fashion_program_options());
  CHECK(fashion.program == "ddp-train");
  CHECK(fashion.data_dir == "/usr/share/datasets/fashion-mnist");
  CHECK_FALSE(d.should_resume());

  auto o = parse_train_options(
      {"--epochs", "3", "--batch_size=32", "--learning-rate", "0.01", "--seed=7", "--data_dir", "/d",
       "--checkpoint_dir=/c", "--resume", "--max_steps", "5", "--no_shuffle", "--save_final", "/w.pt",
       "--log_interval=10", "--lr_factor", "0.5", "--lr_patience", "1", "--num_threads=1",
       "--local_rank=1", "--device", "cpu", "--no-split-batch", "--checkpoint-every-steps", "100"},
      env_of({}));
  CHECK(o.epochs == 3);
  CHECK(o.batch_size == 32);
  CHECK(o.learning_rate == 0.01);
  CHECK(o.seed == 7);
  CHECK(o.data_dir == "/d");
  CHECK(o.checkpoint_dir == "/c");
  CHECK(o.resume);
  CHECK(o.max_steps == 5);
  CHECK(o.no_shuffle);
  CHECK(o.save_final == "/w.pt");
  CHECK(o.log_interval == 10);
  CHECK(o.lr_factor == 0.5);
  CHECK(o.lr_patience == 1);
  CHECK(o.num_threads == 1);
  CHECK(o.local_rank == 1);
  CHECK(o.device == "cpu");
  CHECK_FALSE(o.split_batch);
  CHECK(o.checkpoint_every_steps == 100);
  CHECK(d.checkpoint_every_steps == 0);
  CHECK(d.split_batch);
  CHECK(d.device == "auto");
  CHECK(parse_train_options({"--device=cuda"}, env_of({})).device == "cuda");
}

TEST_CASE("options: the environment decides resume, and no test hook is read", "[train][options]") {
  auto o = parse_train_options({}, env_of({{"TORCHELASTIC_RESTART_COUNT", "1"},
                                           {"DDP_TRAIN_TEST_DIE_AT", "not read"}}));
  CHECK(o.should_resume());
  CHECK(o.launch_dir.empty());
  CHECK(parse_train_options({}, env_of({{"TORCHELASTIC_ERROR_FILE", "/tmp/ddp-launch-x/attempt_1.rank_0.error.json"}}))
            .launch_dir == "/tmp/ddp-launch-x");
  CHECK_THAT(usage_error({}, env_of({{"TORCHELASTIC_RESTART_COUNT", "x"}})),
             Catch::Contains("TORCHELASTIC_RESTART_COUNT: 'x' is not an integer"));
}

TEST_CASE("options: bad values give one line naming option and value", "[train][options]") {
  CHECK(usage_error({"--epochs", "zero"}) == "--epochs: 'zero' is not an integer");
  CHECK_THAT(usage_error({"--epochs=0"}), Catch::Contains("--epochs: 0 is out of range"));
  CHECK(usage_error({"--learning_rate", "-1"}) ==
        "--learning_rate: -1 is out of range, expected a value > 0");
  CHECK_THAT(usage_error({"--lr_factor=1"}), Catch::Contains("0 < value < 1"));
  CHECK(usage_error({"--learning_rate=fast"}) == "--learning_rate: 'fast' is not a number");
  CHECK(usage_error({"--lr_factor=nan"}) == "--lr_factor: 'nan' is not a number");
  CHECK(usage_error({"--bogus"}) == "unknown option '--bogus'");
  CHECK(usage_error({"--batch_size"}) == "--batch_size needs a value");
  CHECK(usage_error({"--resume=1"}) == "--resume takes no value (got '1')");
  CHECK(usage_error({"--no_split_batch=yes"}) == "--no_split_batch takes no value (got 'yes')");
  CHECK(usage_error({"stray"}) == "unexpected argument 'stray'");
  CHECK(usage_error({"--data_dir="}) == "--data_dir: empty path");
  CHECK(usage_error({"--device=gpu"}) == "--device: 'gpu' is not a device, use cpu, cuda or auto");
  CHECK_THAT(usage_error({"--checkpoint_every_steps=-1"}), Catch::Contains("--checkpoint_every_steps: -1 is out of range"));
  CHECK(parse_train_options({"--help"}, env_of({})).help);
  CHECK(ddp::fashion::fashion_usage().find("--save_final") != std::string::npos);
  CHECK(ddp::fashion::fashion_usage().find("--no_split_batch") != std::string::npos);
}

TEST_CASE("metrics.jsonl: one JSON object per line, replayed epochs dropped on resume", "[train][metrics_log]") {
  ddp::test::TempDir tmp;
  const auto path = tmp.file("metrics.jsonl");
  for (int e = 1; e <= 3; ++e) {
    EpochRecord r;
    r.epoch = e;
    r.metrics = {{"accuracy", 0.5 + e / 10.0}, {"macro_f1", 0.25}};
    r.eval_samples = 10000;
    r.checkpoint = tmp.file("epoch_" + std::to_string(e) + ".pt");
    append_metrics(path, r);
  }
  auto text = ddp::test::read_file(path);
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);
  CHECK_THAT(text, Catch::StartsWith("{\"epoch\": 1, \"global_step\": 0,"));
  CHECK_THAT(text, Catch::Contains("\"test_loss\": 0, \"accuracy\": 0.7, \"macro_f1\": 0.25, \"learning_rate\": 0,") &&
                       Catch::Contains("\"eval_samples\": 10000"));

  truncate_metrics_after(path, 1);
  text = ddp::test::read_file(path);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK_THAT(text, Catch::Contains("\"epoch\": 1,"));
  truncate_metrics_after(tmp.file("missing.jsonl"), 0);  // nothing to do, no throw

  EpochRecord nan;
  nan.train_loss = std::numeric_limits<double>::quiet_NaN();
  nan.checkpoint = "a\"b";
  CHECK_THAT(to_json_line(nan), Catch::Contains("\"train_loss\": null") &&
                                    Catch::Contains("\"checkpoint\": \"a\\\"b\""));
  CHECK_THROWS_WITH(append_metrics(tmp.file("no/such/dir/m.jsonl"), nan),
                    Catch::Contains("no/such/dir/m.jsonl"));
}

TEST_CASE("progress: lines every log_interval off a terminal, a bar on one", "[train][progress]") {
  ProgressSnapshot s;
  s.epoch = 1;
  s.epochs = 2;
  s.step = 100;
  s.steps = 469;
  s.loss = 0.42129;
  s.samples = 12800;
  s.elapsed_s = 8.0;
  CHECK(format_progress_line(s) == "epoch 1/2 step 100/469 loss 0.4213 1600 samples/s ETA 0:30");
  CHECK_THAT(format_progress_bar(s, 10), Catch::StartsWith("epoch 1/2 [##........] 100/469"));
  CHECK(format_duration(3725) == "1:02:05");

  std::ostringstream out;
  ProgressPrinter p(out, true, false, 50);
  for (int i = 1; i <= 120; ++i) {
    s.step = i;
    s.steps = 120;
    p.update(s);
  }
  // steps 50, 100 and the last one
  const auto text = out.str();
  CHECK(std::count(text.begin(), text.end(), '\n') == 3);

  std::ostringstream quiet;
  ProgressPrinter off(quiet, false, false, 1);
  off.update(s);
  CHECK(quiet.str().empty());

  std::ostringstream tty;
  ProgressPrinter bar(tty, true, true, 1);
  s.step = 120;
  bar.update(s);
  bar.finish_epoch();
  CHECK_THAT(tty.str(), Catch::StartsWith("\r\033[K") && Catch::EndsWith("\n"));
}
