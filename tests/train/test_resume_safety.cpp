// ddp-train and its checkpoint directory: a fresh run does not take over an
// earlier run's directory, a restarted run resumes only its own checkpoints,
// --resume names every changed option, a damaged newest checkpoint falls
// back to the previous epoch, an unwritable directory fails before training,
// and without a launcher ddp-train trains as one process. Real binary, real
// data, 1 process and a few steps per run.
#include <algorithm>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "ddp/train/fashion_mnist.h"
#include "test_skip.h"
#include "test_support.h"

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

void require_data() {
  if (!fs::exists(std::string(ddp::train::kDefaultDataDir) + "/train-images-idx3-ubyte.gz"))
    DDP_SKIP("dataset-fashion-mnist is not installed");
}

// ddp-train as rank 0 of 1 with an explicit torchrun environment (what
// ddp-launch sets; TORCHELASTIC_RESTART_COUNT as after `restart` restarts).
ProcResult train(const std::vector<std::string>& args, int restart = 0) {
  std::vector<std::string> argv = {bin_path("ddp-train"), "--max_steps=2", "--log_interval=1000"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv,
             {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"},
              {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(free_port())},
              {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)}, {"OMP_NUM_THREADS", "1"}},
             120);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("a fresh run refuses a directory holding an earlier run and keeps its files", "[train][e2e][resume]") {
  require_data();
  TempDir tmp;
  const std::string dir = tmp.file("ck");
  REQUIRE(train({"--epochs=1", "--seed=7", "--checkpoint_dir=" + dir}).exit_code == 0);
  const std::string metrics_before = slurp(dir + "/metrics.jsonl");
  REQUIRE(!metrics_before.empty());

  const auto r = train({"--epochs=1", "--seed=42", "--checkpoint_dir=" + dir});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("checkpoint directory '" + dir +
                                       "' already holds an earlier run's epoch_1.pt and metrics.jsonl; "
                                       "continue that run with --resume, pass another --checkpoint_dir"));
  CHECK_THAT(r.output, !Catch::Contains("epoch 1/1"));  // stopped before training
  CHECK(slurp(dir + "/metrics.jsonl") == metrics_before);
}

TEST_CASE("a restarted run refuses another run's checkpoint instead of resuming it", "[train][e2e][resume]") {
  require_data();
  TempDir tmp;
  const std::string dir = tmp.file("ck");
  REQUIRE(train({"--epochs=2", "--seed=7", "--checkpoint_dir=" + dir}).exit_code == 0);
  const std::string metrics_before = slurp(dir + "/metrics.jsonl");

  // As the issue met it: another run's epoch_2.pt in the directory of a run
  // (seed 42) that the launcher restarted.
  const auto r = train({"--epochs=3", "--seed=42", "--checkpoint_dir=" + dir}, /*restart=*/1);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("checkpoint '" + dir + "/epoch_2.pt' was written with other options: "
                                       "--seed 7 (this run: 42), so it belongs to another run"));
  CHECK_THAT(r.output, !Catch::Contains("resumed from"));
  CHECK(slurp(dir + "/metrics.jsonl") == metrics_before);
}

TEST_CASE("resume: --resume with a changed seed or learning rate says so", "[train][e2e][resume]") {
  require_data();
  TempDir tmp;
  const std::string dir = tmp.file("ck");
  REQUIRE(train({"--epochs=1", "--seed=42", "--checkpoint_dir=" + dir}).exit_code == 0);
  const auto r = train({"--epochs=2", "--seed=7", "--lr=0.01", "--resume", "--checkpoint_dir=" + dir});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("note: checkpoint '" + dir + "/epoch_1.pt' was written with other options: "
                                       "--learning_rate 0.001 (this run: 0.01), --seed 42 (this run: 7); "
                                       "continuing as asked"));
  CHECK_THAT(r.output, Catch::Contains("resumed from " + dir + "/epoch_1.pt"));
}

TEST_CASE("a damaged newest checkpoint falls back to the previous epoch's", "[train][e2e][resume]") {
  require_data();
  TempDir tmp;
  const std::string dir = tmp.file("ck");
  REQUIRE(train({"--epochs=2", "--checkpoint_dir=" + dir}).exit_code == 0);
  fs::resize_file(dir + "/epoch_2.pt", fs::file_size(dir + "/epoch_2.pt") / 2);

  const auto r = train({"--epochs=2", "--checkpoint_dir=" + dir}, /*restart=*/1);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: checkpoint '" + dir + "/epoch_2.pt' is truncated or corrupt"));
  CHECK_THAT(r.output, Catch::Contains("resumed from " + dir + "/epoch_1.pt (epoch 1, step 2, restart 1)"));
  CHECK_THAT(r.output, Catch::Contains("training finished: 2 epochs, 4 steps"));
}

TEST_CASE("an unwritable checkpoint directory fails before training with one message", "[train][e2e][errors]") {
  require_data();
  const auto r = train({"--epochs=1", "--checkpoint_dir=/proc/self"});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("checkpoint directory '/proc/self' is not writable (creating temp file "
                                       "'/proc/self/.ddp-train-write-test.tmp.") &&
                           Catch::Contains("pass a writable --checkpoint_dir"));
  CHECK_THAT(r.output, !Catch::Contains("epoch 1/1"));
}

TEST_CASE("without a launcher ddp-train trains as a single process", "[train][e2e]") {
  require_data();
  TempDir tmp;
  std::map<std::string, std::string> bare;
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    bare[v] = "\x01unset";
  const auto r = run({bin_path("ddp-train"), "--epochs=1", "--max_steps=2", "--num_threads=1",
                      "--checkpoint_dir=" + tmp.file("ck")},
                     bare, 120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("no torchrun environment (RANK, WORLD_SIZE, ... unset): training as a "
                                       "single process"));
  CHECK_THAT(r.output, Catch::Contains("ddp-train: world size 1,"));
  CHECK_THAT(r.output, Catch::Contains("training finished: 1 epochs, 2 steps"));

  bare["RANK"] = "0";  // a partial environment is a mistake: every missing variable in one line
  const auto partial = run({bin_path("ddp-train"), "--checkpoint_dir=" + tmp.file("ck2")}, bare, 120);
  INFO(partial.output);
  CHECK(partial.exit_code == 1);
  CHECK_THAT(partial.output, Catch::Contains("WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT are not set: "
                                             "run the program under ddp-launch"));
}

// Minor page faults of a whole ddp-train run (GNU time's %R), so the
// difference between a 22-step and a 2-step run is what the 20 extra
// training steps fault in. glibc's default malloc returns each step's
// activations to the kernel and faults them in again (~6000 faults per
// step); with the runtime's malloc settings the heap is reused (~10). The
// 2-step run is mostly loading and one evaluation of 10000 images: ~50k
// faults with evaluation batches below the mmap threshold, ~650k when each
// batch's 100 MiB activation was mapped and faulted in anew.
TEST_CASE("ddp-train's training steps reuse memory instead of faulting it in again", "[train][e2e][malloc]") {
  require_data();
#ifdef __SANITIZE_ADDRESS__
  DDP_SKIP("AddressSanitizer replaces malloc and faults in its own shadow memory");
#endif
  if (!fs::exists("/usr/bin/time")) DDP_SKIP("GNU time (/usr/bin/time) is not installed");
  TempDir tmp;
  int runs = 0;
  auto faults = [&](int steps) {
    const std::string tag = std::to_string(steps) + "-" + std::to_string(++runs);
    const std::string out = tmp.file("time-" + tag);
    const auto r = run({"/usr/bin/time", "-f", "%R", "-o", out, bin_path("ddp-train"), "--epochs=1",
                        "--max_steps=" + std::to_string(steps), "--num_threads=1", "--log_interval=1000",
                        "--checkpoint_dir=" + tmp.file("ck-" + tag)},
                       {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"},
                        {"MASTER_PORT", std::to_string(free_port())}},
                       120);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return std::stol(slurp(out));
  };
  // The fewest of 3 runs each, and 100 steps apart: loading LibTorch 2.x (its
  // CUDA libraries) faults a varying number of pages per process (seen:
  // 81k-99k for the same 2 steps), which 20 steps apart swamped the steps'.
  auto fewest = [&](int steps) { return std::min({faults(steps), faults(steps), faults(steps)}); };
  const long short_run = fewest(2);
  const long long_run = fewest(102);
  const long per_step = (long_run - short_run) / 100;
  INFO("minor faults: " << short_run << " (2 steps), " << long_run << " (102 steps): " << per_step << " per step");
  CHECK(per_step < 200);
  CHECK(short_run < 200000);
}
