// ddp-text end to end on the real WordNet under the real ddp-launch, short
// runs (--max_steps): learning with 2 processes, DDP parity (2 x b against
// 1 x 2b, with the unused-parameter model), a killed worker restarted and
// resumed (or brought back in place) to the uninterrupted weights, the
// Python twin scoring the C++ checkpoint, a quality floor, and bad data as
// one clear line.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "ddp/worker/checkpoint.h"
#include "reference_python.h"
#include "test_skip.h"
#include "test_support.h"
#include "training_runs.h"

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

constexpr const char* kWordNet = "/usr/share/wordnet";

bool have_wordnet() { return fs::exists(std::string(kWordNet) + "/data.noun"); }

// One prepared directory for the whole test process (0.5 s to make).
const std::string& prepared_dir() {
  static TempDir dir;
  static const std::string path = [] {
    const std::string p = dir.file("text-data");
    const auto r = run({bin_path("ddp-text"), "--prepare_only", "--data_dir=" + p}, {}, 60);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return p;
  }();
  return path;
}

ProcResult launch(int nproc, std::vector<std::string> args, const std::map<std::string, std::string>& env = {},
                  int max_restarts = 0) {
  args.insert(args.begin(), "--data_dir=" + prepared_dir());
  return launch_training("ddp-text", nproc, args, env, max_restarts, 240);
}


}  // namespace

TEST_CASE("ddp-text: 2 processes learn past a macro-F1 floor, evaluate all 11990 test samples and print the "
          "seeds' best F1 lines",
          "[text][e2e]") {
  if (!have_wordnet()) DDP_SKIP("wordnet-base is not installed");
  TempDir tmp;
  const auto r = launch(2, {"--epochs=3", "--max_steps=100", "--log_interval=50", "--checkpoint_dir=" + tmp.file("ck")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto lines = lines_of(tmp.file("ck/metrics.jsonl"));
  REQUIRE(lines.size() == 3);
  CHECK(json_number(lines[0], "train_loss") < 3.6);  // untrained: ln(45) = 3.81
  CHECK(json_number(lines[2], "train_loss") < json_number(lines[0], "train_loss"));
  // The floor: this run (seed 42) measured macro-F1 0.125, 0.162, 0.186 after
  // epochs 1..3 (LibTorch 1.13, AVX2 and default kernels alike). Guessing
  // the largest class scores ~0.005 and the class prior no better, so 0.15
  // after epoch 3 needs real learning beyond the first epoch, with 20%
  // margin for other kernels and LibTorch versions.
  CHECK(json_number(lines[2], "macro_f1") > 0.15);
  CHECK(json_number(lines[2], "micro_f1") > json_number(lines[2], "macro_f1"));  // imbalanced classes
  for (const auto& l : lines) {
    CHECK(json_number(l, "eval_samples") == 11990);
    CHECK(json_number(l, "train_samples") == 2 * 100 * 64);
  }
  CHECK_THAT(r.output, Catch::Contains("WordNet glosses 105669 train / 11990 test, vocabulary 33185, 45 classes"));
  const std::regex best("best (macro|micro) f1: [0-9.]+ in epoch: [123], saved in: .*epoch_[123]\\.pt");
  CHECK(std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), best), std::sregex_iterator()) == 2);
  CHECK(fs::exists(tmp.file("ck/epoch_3.pt")));
}

TEST_CASE("ddp-text: 2 processes x batch 16 end with the weights of 1 process x batch 32", "[text][e2e][numerics]") {
  if (!have_wordnet()) DDP_SKIP("wordnet-base is not installed");
  TempDir tmp;
  // No dropout (its masks depend on the batch split), no shuffle, a rate at
  // which Adam's normalized steps do not amplify float rounding.
  const std::vector<std::string> common = {"--epochs=1", "--max_steps=25", "--lr=1e-4", "--no_shuffle",
                                           "--dropout=0", "--seed=3", "--model=textcnn_unused"};
  auto two = common, one = common;
  two.insert(two.end(), {"--batch_size=16", "--checkpoint_dir=" + tmp.file("two"), "--save_final=" + tmp.file("two.pt")});
  one.insert(one.end(), {"--batch_size=32", "--checkpoint_dir=" + tmp.file("one"), "--save_final=" + tmp.file("one.pt")});
  const auto r2 = launch(2, two);
  INFO(r2.output);
  REQUIRE(r2.exit_code == 0);
  const auto r1 = launch(1, one);
  INFO(r1.output);
  REQUIRE(r1.exit_code == 0);
  const double rel = max_relative_difference(tmp.file("two.pt"), tmp.file("one.pt"));
  INFO("largest relative difference " << rel);
  CHECK(rel < 1e-4);
  REQUIRE(ddp::worker::load_weights(tmp.file("two.pt")).find("unused.weight") != nullptr);
  // The control: another sample order gives other weights, so the bound
  // above does tell runs apart.
  auto shuffled = one;
  shuffled.erase(std::find(shuffled.begin(), shuffled.end(), std::string("--no_shuffle")));
  shuffled.back() = "--save_final=" + tmp.file("shuffled.pt");
  shuffled[shuffled.size() - 2] = "--checkpoint_dir=" + tmp.file("shuffled");
  REQUIRE(launch(1, shuffled).exit_code == 0);
  CHECK(max_relative_difference(tmp.file("shuffled.pt"), tmp.file("one.pt")) > 1e-3);
}

// Pass 1 only ([program-logic]): the loop's resume is tested in process
// (tests/loop) and through ddp-train in every pass; this one adds ddp-text's
// dropout, whose RNG state the checkpoint carries with the same LibTorch
// calls ddp-train's case makes, and its data preparation; the in-place
// recovery run adds about 15 s.
TEST_CASE("ddp-text: a worker killed mid-epoch is restarted, or brought back in place, and the job ends with the "
          "uninterrupted weights",
          "[text][e2e][resume][program-logic]") {
  if (!have_wordnet()) DDP_SKIP("wordnet-base is not installed");
  TempDir tmp;
  auto args = [&](const std::string& name) {
    return std::vector<std::string>{"--epochs=3", "--max_steps=6", "--seed=11", "--batch_size=32",
                                    "--checkpoint_dir=" + tmp.file(name), "--save_final=" + tmp.file(name + ".pt")};
  };
  const auto plain = launch(2, args("plain"));
  INFO(plain.output);
  REQUIRE(plain.exit_code == 0);
  // (ddp-text-faults: ddp-text with the tests' fault hook, tests/support/fault_main.cpp.)
  const auto killed = launch_training("ddp-text-faults", 2, args("killed"),
                                      {{"DDP_TEST_DIE_AT", "1:14"}, {"PET_RECOVERY", "restart"}},
                                      /*max_restarts=*/1, 240);
  INFO(killed.output);
  REQUIRE(killed.exit_code == 0);
  CHECK_THAT(killed.output, Catch::Contains("resumed from " + tmp.file("killed/epoch_2.pt") + " (epoch 2, step 12, restart 1)"));
  // Dropout included: the checkpoint carries the RNG state.
  CHECK(max_relative_difference(tmp.file("killed.pt"), tmp.file("plain.pt")) < 1e-6);
  const auto a = lines_of(tmp.file("plain/metrics.jsonl")), b = lines_of(tmp.file("killed/metrics.jsonl"));
  REQUIRE(a.size() == 3);
  REQUIRE(b.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(json_number(b[i], "macro_f1") == json_number(a[i], "macro_f1"));

  // In place (issue 48): the survivor's failed step drew its dropout mask
  // from LibTorch's generator before the collective failed, so the weights
  // are the uninterrupted run's only if the survivor puts that generator
  // back (in_place_recovery.cpp's restore_kept) and the returning rank
  // skips the data preparation's collective (program_setup.cpp), which
  // held both ranks until the launcher's recovery timeout.
  const auto in_place = launch_training("ddp-text-faults", 2, args("in_place"), {{"DDP_TEST_DIE_AT", "1:14"}},
                                        /*max_restarts=*/1, 240);
  INFO(in_place.output);
  REQUIRE(in_place.exit_code == 0);
  CHECK_THAT(in_place.output, Catch::Contains("ddp-launch: rank 1 is back after ") &&
                                  !Catch::Contains("restarting the group") && !Catch::Contains("resumed from"));
  CHECK(max_relative_difference(tmp.file("in_place.pt"), tmp.file("plain.pt")) == 0);
}

TEST_CASE("ddp-text: the Python twin scores the C++ checkpoint with the macro-F1 ddp-text reported",
          "[text][e2e][python]") {
  if (!have_wordnet()) DDP_SKIP("wordnet-base is not installed");
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  TempDir tmp;
  const auto r = launch(2, {"--epochs=1", "--max_steps=40", "--checkpoint_dir=" + tmp.file("ck")});
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto line = lines_of(tmp.file("ck/metrics.jsonl")).at(0);
  // torch.load(..., map_location="cpu") of the per-epoch checkpoint, as the
  // seeds load theirs, then the twin's own evaluation of the test split.
  const auto e = run({py, source_path("bench/text/python_text.py"), "--data_dir=" + prepared_dir(),
                      "--evaluate=" + tmp.file("ck/epoch_1.pt")},
                     {{"OMP_NUM_THREADS", "1"}}, 120);
  INFO(e.output);
  REQUIRE(e.exit_code == 0);
  CHECK(json_number(e.output, "eval_samples") == 11990);
  CHECK(std::abs(json_number(e.output, "macro_f1") - json_number(line, "macro_f1")) < 1e-6);
  CHECK(std::abs(json_number(e.output, "micro_f1") - json_number(line, "micro_f1")) < 1e-6);
  CHECK(std::abs(json_number(e.output, "accuracy") - json_number(line, "accuracy")) < 1e-6);
}

TEST_CASE("ddp-text: bad data and bad options give one clear line",
          "[text][e2e][errors][sanitize-e2e][program-logic]") {
  TempDir tmp;
  SECTION("no WordNet") {
    const auto r = run({bin_path("ddp-text"), "--wordnet_dir=" + tmp.file("none"), "--data_dir=" + tmp.file("d")}, {}, 60);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("install Debian's wordnet-base"));
    CHECK_THAT(r.output, Catch::Contains(tmp.file("none")));
  }
  SECTION("a damaged prepared file") {
    if (!have_wordnet()) DDP_SKIP("wordnet-base is not installed");
    const std::string d = tmp.file("d");
    fs::copy(prepared_dir(), d);
    // (An edited vocab.txt is not up to date: rank 0 prepares it again.)
    { std::ofstream(d + "/test.csv", std::ios::app) << "some text,noun.unicorn\n"; }
    const auto r = run({bin_path("ddp-text"), "--data_dir=" + d, "--checkpoint_dir=" + tmp.file("ck")}, {}, 60);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(d + "/test.csv:") && Catch::Contains("unknown label 'noun.unicorn'"));
    CHECK_THAT(r.output, Catch::Contains("--prepare_only"));
  }
  SECTION("bad options") {
    for (const auto& [arg, message] : std::vector<std::pair<std::string, std::string>>{
             {"--dropout=1", "--dropout: 1 is out of range"},
             {"--model=bert", "--model: 'bert' is not a model"},
             {"--max_length=0", "--max_length"},
             {"--min_count=x", "--min_count"}}) {
      const auto r = run({bin_path("ddp-text"), arg}, {}, 30);
      INFO(arg << ": " << r.output);
      CHECK(r.exit_code == 2);
      CHECK_THAT(r.output, Catch::Contains("ddp-text: error: " + message));
    }
  }
}
