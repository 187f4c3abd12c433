// ddp-text's batch halves (TextTask::make_replica, before_halves): one
// process with 2 threads trains each batch in two halves at once, its
// dropout drawn from a generator per half that the loop's thread seeds from
// LibTorch's default generator every batch. In process, on a small random
// data set: the halves are used, they give the whole batch's weights without
// dropout (the replica's sparse embedding gradient added into the model's
// dense one), and with dropout a run is reproducible and a resume replays it.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <sstream>
#include <string>

#include "ddp/loop/trainer.h"
#include "ddp/text/text_task.h"
#include "ddp/worker/checkpoint.h"
#include "ddp/worker/in_process.h"
#include "ddp/worker/process_group.h"
#include "test_support.h"
#include "training_runs.h"

using namespace ddp::text;
using ddp::test::TempDir;

namespace {

// `n` sequences of 1..12 tokens over a vocabulary of 40 (ids 2..39), 45 classes.
TextSplit synthetic_split(int n, std::uint64_t seed) {
  torch::manual_seed(static_cast<std::int64_t>(seed));
  TextSplit s;
  s.offsets.push_back(0);
  const auto lengths = torch::randint(1, 13, {n}, torch::kLong);
  for (int i = 0; i < n; ++i) {
    const auto ids = torch::randint(2, 40, {lengths[i].item<std::int64_t>()}, torch::kLong);
    for (std::int64_t k = 0; k < ids.size(0); ++k) s.tokens.push_back(static_cast<std::int32_t>(ids[k].item<std::int64_t>()));
    s.offsets.push_back(static_cast<std::int64_t>(s.tokens.size()));
    s.labels.push_back(static_cast<std::uint8_t>((s.tokens[static_cast<std::size_t>(s.offsets[i])] * 7 + i) % 45));
  }
  return s;
}

const TextData& synthetic_data() {
  static const TextData data = [] {
    std::string words = "<pad>\n<unk>\n";
    for (int i = 2; i < 40; ++i) words += "w" + std::to_string(i) + "\n";
    TextData d{Vocabulary::parse(words, "synthetic vocab.txt"), {}, synthetic_split(320, 1), synthetic_split(64, 2)};
    for (int c = 0; c < 45; ++c) d.label_names.push_back("class" + std::to_string(c));
    return d;
  }();
  return data;
}

ddp::loop::TrainOptions options(const std::string& dir, bool split, int epochs = 2) {
  ddp::loop::TrainOptions o;
  o.program = "text-halves-test";
  o.epochs = epochs;
  o.batch_size = 16;
  o.learning_rate = 0.01;
  o.checkpoint_dir = dir;
  o.save_final = dir + ".pt";
  o.log_interval = 1000;
  o.seed = 9;
  o.split_batch = split;
  return o;
}

// One process with 2 threads; its output, or the error.
std::string train(const ddp::loop::TrainOptions& o, double dropout) {
  std::string out;
  ddp::worker::run_ranks_in_process(1, [&](const std::shared_ptr<ddp::worker::ProcessGroup>& pg) {
    at::set_num_threads(2);
    TextCnnOptions model;
    model.embedding_dim = 16;
    model.num_filters = 8;
    model.dropout = dropout;
    TextTask task(synthetic_data(), model);
    std::ostringstream s;
    try {
      ddp::loop::run_training(o, pg, task, s, false);
    } catch (const std::exception& e) {
      s << "error: " << e.what();
    }
    out = s.str();
  });
  return out;
}


}  // namespace

TEST_CASE("TextTask at one process with 2 threads: each batch in two halves, the whole batch's weights without dropout",
          "[text][halves]") {
  TempDir tmp;
  const auto halves = train(options(tmp.file("halves"), true), 0);
  INFO(halves);
  REQUIRE_THAT(halves, Catch::Contains("2 threads per process (each batch in two halves at once, on 1 + 1)"));
  const auto whole = train(options(tmp.file("whole"), false), 0);
  INFO(whole);
  REQUIRE_THAT(whole, !Catch::Contains("each batch in two halves") && !Catch::Contains("error"));
  CHECK(ddp::test::max_relative_difference(tmp.file("halves.pt"), tmp.file("whole.pt")) < 1e-5);
}

TEST_CASE("TextTask's halves with dropout: the same weights on every run, and a resume replays the masks",
          "[text][halves]") {
  TempDir tmp;
  const auto first = train(options(tmp.file("a"), true), 0.5);
  INFO(first);
  REQUIRE_THAT(first, Catch::Contains("each batch in two halves") && !Catch::Contains("error"));
  REQUIRE(train(options(tmp.file("b"), true), 0.5).find("error") == std::string::npos);
  CHECK(ddp::test::max_relative_difference(tmp.file("a.pt"), tmp.file("b.pt")) == 0);
  // The masks are drawn: without dropout the weights differ.
  REQUIRE(train(options(tmp.file("none"), true), 0).find("error") == std::string::npos);
  CHECK(ddp::test::max_relative_difference(tmp.file("none.pt"), tmp.file("a.pt")) > 1e-3);

  // One epoch, then a resume to the second: the checkpoint's generator state
  // seeds the same masks.
  auto resumed = options(tmp.file("r"), true, 1);
  REQUIRE(train(resumed, 0.5).find("error") == std::string::npos);
  resumed.epochs = 2;
  resumed.resume = true;
  const auto second = train(resumed, 0.5);
  INFO(second);
  REQUIRE_THAT(second, Catch::Contains("resumed from"));
  CHECK(ddp::test::max_relative_difference(tmp.file("r.pt"), tmp.file("a.pt")) == 0);
}
