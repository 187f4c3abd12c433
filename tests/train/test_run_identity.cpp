// run_identity: which options make a run, how a checkpoint stores them and
// how a change is worded.
#include <catch2/catch.hpp>

#include "ddp/loop/run_identity.h"

using namespace ddp::loop;

TEST_CASE("run identity: the trajectory options, stored as text that reads back", "[identity]") {
  TrainOptions o;
  o.seed = 4611686018427387904ULL;  // 2^62: beyond a double's exact integers
  o.learning_rate = 0.001;
  o.lr_factor = 0.1;
  const std::string text = format_identity(run_identity(o));
  CHECK(text ==
        "batch_size=64 learning_rate=0.001 lr_factor=0.1 lr_patience=10 max_steps=0 no_shuffle=0 "
        "seed=4611686018427387904");
  CHECK(parse_identity(text) == run_identity(o));
  CHECK(identity_changes(parse_identity(text), run_identity(o)).empty());
}

TEST_CASE("run identity: epochs and world size are not part of it", "[identity]") {
  TrainOptions a, b;
  b.epochs = a.epochs + 5;
  b.num_threads = 3;
  b.checkpoint_dir = "elsewhere";
  CHECK(run_identity(a) == run_identity(b));
}

TEST_CASE("run identity: each change is named with both values", "[identity]") {
  TrainOptions a, b;
  b.seed = 7;
  b.learning_rate = 0.01;
  const auto changes = identity_changes(run_identity(a), run_identity(b));
  REQUIRE(changes.size() == 2);
  CHECK(describe_changes(changes) == "--learning_rate 0.001 (this run: 0.01), --seed 42 (this run: 7)");
  // A checkpoint without an identity (older ddp-train) differs in every option.
  CHECK(identity_changes(parse_identity(""), run_identity(a)).size() == run_identity(a).size());
  CHECK(identity_changes(parse_identity(""), run_identity(a)).front().saved == "(none)");
}

TEST_CASE("run identity: doubles are written exactly and briefly", "[identity]") {
  TrainOptions o;
  o.learning_rate = 0.1 + 0.2;  // 0.30000000000000004
  o.lr_factor = 0.5;
  const auto id = run_identity(o);
  CHECK(id.at("learning_rate") == "0.30000000000000004");
  CHECK(id.at("lr_factor") == "0.5");
  CHECK(std::stod(id.at("learning_rate")) == o.learning_rate);
}

// Issue 15, defect 13: after `--resume --lr 0.01` the note said "continuing
// as asked" while the checkpoint's rate was kept. The note says what is used.
TEST_CASE("run identity: a resume's note names the value in effect for each changed option", "[identity]") {
  TrainOptions saved, now;
  now.seed = 7;
  now.learning_rate = 0.01;
  now.batch_size = 32;
  const auto changes = identity_changes(run_identity(saved), run_identity(now));
  // The checkpoint's rate is 1e-4: ReduceLROnPlateau had lowered 1e-3.
  CHECK(describe_resume_effect(changes, 1e-4) ==
        "--batch_size 32 (was 64), --learning_rate 0.0001 from the checkpoint (the 0.01 given is not used), "
        "--seed 7 (was 42)");
}

// Issue 15, defect 1: what tells a restart of this launch from a later
// launch of the same command, in the error-file layouts of torchrun and
// ddp-launch.
TEST_CASE("run identity: the launch directory from TORCHELASTIC_ERROR_FILE", "[identity]") {
  CHECK(launch_directory("/tmp/torchelastic_ab12/none_x9y/attempt_0/1/error.json") == "/tmp/torchelastic_ab12/none_x9y");
  CHECK(launch_directory("/tmp/ddp-launch-Qw3/attempt_12.rank_0.error.json") == "/tmp/ddp-launch-Qw3");
  CHECK(launch_directory("/logs/job_Ab/attempt_3/0/error.json") == "/logs/job_Ab");
  // The last attempt_<digit> counts; a directory merely named attempt_x does not.
  CHECK(launch_directory("/d/attempt_1/run/attempt_2/0/error.json") == "/d/attempt_1/run");
  CHECK(launch_directory("/d/attempt_x/error.json") == "");
  CHECK(launch_directory("") == "");
  CHECK(launch_directory("error.json") == "");
}
