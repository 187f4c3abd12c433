// ddp-train and its checkpoint directory where the real program matters: a
// damaged newest checkpoint falls back to the previous epoch (the program's
// own checkpoint file), a full disk fails before training (a real tmpfs in a
// mount namespace of the program's own), without a launcher ddp-train trains
// as one process, and its steps reuse memory. The directory's other rules
// (run identity, lock, temp files, --save_final, failed saves, the metrics
// line put back) are the loop's, tested in process in
// tests/loop/test_checkpoint_dir_in_process.cpp. Real binary, real data (the
// first 8192 + 1024 samples: small_fashion_dir), 1 process and a few steps
// per run.
#include <algorithm>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "fashion_fixture.h"
#include "test_skip.h"
#include "test_support.h"

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

// ddp-train as rank 0 of 1 with an explicit torchrun environment (what
// ddp-launch sets; TORCHELASTIC_RESTART_COUNT as after `restart` restarts),
// on the small data directory (the cases here are about the checkpoint
// directory, not the data).
// `wrapper` goes before the program (`sh -c ...; exec "$@"`).
ProcResult train(const std::vector<std::string>& args, int restart = 0,
                 const std::vector<std::string>& wrapper = {}) {
  std::vector<std::string> argv = wrapper;
  argv.insert(argv.end(), {bin_path("ddp-train"), "--max_steps=2", "--log_interval=1000",
                           "--data_dir=" + small_fashion_dir()});
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

TEST_CASE("a damaged newest checkpoint falls back to the previous epoch's", "[train][e2e][resume]") {
  DDP_REQUIRE_FASHION_DATA();
  TempDir tmp;
  const std::string dir = tmp.file("ck");
  REQUIRE(train({"--epochs=2", "--checkpoint_dir=" + dir}).exit_code == 0);
  fs::resize_file(dir + "/epoch_2.pt", fs::file_size(dir + "/epoch_2.pt") / 2);

  const auto r = train({"--epochs=2", "--checkpoint_dir=" + dir}, /*restart=*/1);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: checkpoint '" + dir + "/epoch_2.pt' is truncated or corrupt"));
  CHECK_THAT(r.output, !Catch::Contains("put back"));  // epoch 1's line was there
  CHECK_THAT(r.output, Catch::Contains("resumed from " + dir + "/epoch_1.pt (epoch 1, step 2, restart 1)"));
  CHECK_THAT(r.output, Catch::Contains("training finished: 2 epochs, 4 steps"));
}

// The lock file opens (an earlier run made it) but nothing more fits: the
// probe written after taking the lock finds that before any training.
TEST_CASE("a full checkpoint directory fails before training with one message",
          "[train][e2e][errors][program-logic]") {
  DDP_REQUIRE_FASHION_DATA();
  if (run({"unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"}, {}, 10).exit_code != 0)
    DDP_SKIP("a mount namespace with a tmpfs of its own (unshare -m, mount) is not allowed here");
  TempDir tmp;
  const std::string dir = tmp.file("full");
  fs::create_directories(dir);
  const auto r = train({"--epochs=1", "--checkpoint_dir=" + dir}, 0,
                       {"unshare", "-m", "--propagation", "private", "sh", "-c",
                        "mount -t tmpfs -o size=16k tmpfs \"$0\" && : > \"$0/.ddp-loop.lock\" && "
                        "{ cat /dev/zero > \"$0/fill\"; } 2>/dev/null; exec \"$@\"",
                        dir});
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("checkpoint directory '" + dir + "' is not writable (") &&
                           Catch::Contains("/.ddp-loop-write-test.tmp.") &&
                           Catch::Contains("No space left on device); pass a writable --checkpoint_dir"));
  CHECK_THAT(r.output, !Catch::Contains("epoch 1/1"));
}

TEST_CASE("without a launcher ddp-train trains as a single process", "[train][e2e][program-logic]") {
  DDP_REQUIRE_FASHION_DATA();
  TempDir tmp;
  std::map<std::string, std::string> bare;
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    bare[v] = "\x01unset";
  const auto r = run({bin_path("ddp-train"), "--epochs=1", "--max_steps=2", "--num_threads=1",
                      "--data_dir=" + small_fashion_dir(), "--checkpoint_dir=" + tmp.file("ck")},
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
  DDP_REQUIRE_FASHION_DATA();
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
