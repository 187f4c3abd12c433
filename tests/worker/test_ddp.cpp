// DistributedDataParallel with real processes on Gloo: parity with a single
// process on the combined batch, no_sync accumulation, overlap of bucket
// allreduces with backward, unused parameters, failures inside a backward, a
// rank that dies. The reducer's other protocol cases (unused parameters under
// no_sync and on one rank only, mismatched models, arming, bucket sizes) run
// with ranks as threads: test_in_process_reducer.cpp. The [tsan] cases stay
// here while ThreadSanitizer's build has no in-process target.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <map>
#include <set>
#include <sstream>

#include "ddp/common/error_file.h"
#include "ddp/worker/checkpoint.h"
#include "test_support.h"
#include "worker_test_util.h"

using namespace ddp::test;

namespace {

double max_rel_error(const torch::OrderedDict<std::string, at::Tensor>& a,
                     const torch::OrderedDict<std::string, at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (const auto& item : a) {
    const at::Tensor* other = b.find(item.key());
    REQUIRE(other != nullptr);
    auto x = item.value().to(torch::kDouble), y = other->to(torch::kDouble);
    double rel = ((x - y).norm() / y.norm().clamp_min(1e-12)).item<double>();
    worst = std::max(worst, rel);
  }
  return worst;
}

void check_parity(const std::string& variant, const std::vector<std::string>& extra = {}) {
  TempDir dir;
  const std::string steps = "steps=6", batch = "batch=16";
  auto single = run({helper_path(), "parity", "variant=single", steps, batch, "out=" + dir.file("single.pt")}, {}, 90);
  INFO(single.output);
  REQUIRE(single.exit_code == 0);
  std::vector<std::string> args{"parity", "variant=" + variant, steps, batch, "out=" + dir.file("rank{rank}.pt")};
  args.insert(args.end(), extra.begin(), extra.end());
  auto ranks = run_ranks(2, args);
  auto ref = ddp::worker::load_weights(dir.file("single.pt"));
  // Each rank wrote its own file; compare each with the single process.
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << ranks[r].output);
    REQUIRE(ranks[r].exit_code == 0);
    auto got = ddp::worker::load_weights(dir.file("rank" + std::to_string(r) + ".pt"));
    const double err = max_rel_error(got, ref);
    INFO("max relative error " << err);
    CHECK(err < 1e-5);
  }
  // Not trivially equal: training moved the weights.
  CHECK_FALSE(torch::equal(ref["fc1.weight"], torch::zeros_like(ref["fc1.weight"])));
}

}  // namespace

TEST_CASE("ddp: 2 ranks with batch B match 1 process with batch 2B", "[tsan][tsan-gloo]") { check_parity("ddp"); }

TEST_CASE("ddp: no_sync accumulation over 2 micro-batches matches 1 process with batch 2B", "[tsan][tsan-gloo]") {
  check_parity("nosync");
}

TEST_CASE("ddp: parity holds with private buckets and with gradients reset to none between steps") {
  SECTION("private buckets (gradient_as_bucket_view off)") { check_parity("ddp", {"views=0"}); }
  SECTION("private buckets under no_sync") { check_parity("nosync", {"views=0"}); }
  SECTION("bucket views, gradients set to none each step") { check_parity("ddp", {"zero=none"}); }
  SECTION("bucket views under no_sync, gradients set to none each step") { check_parity("nosync", {"zero=none"}); }
}

TEST_CASE("ddp: gradients live in the buckets, stay there across steps, zero_grad and set_to_none", "[tsan][tsan-gloo]") {
  for (const std::string views : {"1", "0"}) {
    auto ranks = run_ranks(2, {"views", "views=" + views});
    for (auto& r : ranks) {
      INFO("views=" << views << ": " << r.output);
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("views ok"));
    }
  }
}

TEST_CASE("ddp: ranks end with identical weights (buffers broadcast from rank 0)") {
  TempDir dir;
  const int port = free_port();
  std::vector<std::unique_ptr<Proc>> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(std::make_unique<Proc>(
        std::vector<std::string>{helper_path(), "parity", "variant=ddp", "steps=2", "batch=8",
                                 "out=" + dir.file("r" + std::to_string(r) + ".pt")},
        rank_env(r, 2, port)));
  for (auto& p : procs) {
    INFO(p->output());
    REQUIRE(p->wait(90) == 0);
  }
  auto a = ddp::worker::load_weights(dir.file("r0.pt")), b = ddp::worker::load_weights(dir.file("r1.pt"));
  for (const auto& item : a) {
    INFO(item.key());
    CHECK(torch::equal(item.value(), b[item.key()]));
  }
}

TEST_CASE("ddp: an early bucket's allreduce starts before backward finishes", "[tsan][tsan-gloo]") {
  TempDir dir;
  auto ranks = run_ranks(2, {"overlap", "out=" + dir.file("events.txt")});
  for (auto& r : ranks) {
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
  std::istringstream in(read_file(dir.file("events.txt")));
  std::string kind;
  size_t buckets = 0, pos = 0, first_launch = 0, last_grad = 0, finished = 0, launches = 0, computed = 0;
  std::set<size_t> reduced;
  bool launched = false;
  while (in >> kind) {
    size_t idx = 0, n = 0;
    if (kind == "B") {
      in >> idx >> n;
      ++buckets;
      continue;
    }
    ++pos;
    if (kind == "G") {
      in >> idx;
      last_grad = pos;
    } else if (kind == "L") {
      in >> idx;
      CHECK(idx == launches);  // buckets launch in order
      ++launches;
      if (!launched) first_launch = pos;
      launched = true;
    } else if (kind == "R") {
      in >> idx;
      reduced.insert(idx);
    } else if (kind == "C") {
      computed = pos;
    } else if (kind == "F") {
      finished = pos;
    }
  }
  INFO(read_file(dir.file("events.txt")));
  REQUIRE(buckets >= 3);  // 6 layers of 1 MiB with a 1 MiB cap
  CHECK(launches == buckets);
  REQUIRE(launched);
  // The first bucket went out while gradients of earlier layers were still
  // being computed, i.e. communication overlapped the rest of backward.
  CHECK(first_launch < last_grad);
  CHECK(last_grad < computed);  // autograd finished after the last gradient
  CHECK(computed < finished);   // and DDP's end of backward after that
  CHECK(reduced.size() == buckets);  // every bucket's completion was seen (timeline)
}

TEST_CASE("ddp: unused parameters are reported by name, or reduced with find_unused_parameters", "[tsan][tsan-gloo]") {
  // float32: the step's status rides in the last bucket; float16: it cannot
  // (not exact), so it is an allreduce of its own, the path NCCL takes too.
  for (const std::string dtype : {"dtype=f32", "dtype=f16"}) {
    auto bad = run_ranks(2, {"unused", "find_unused=0", dtype});
    for (auto& r : bad) {
      INFO(dtype << ": " << r.output);
      CHECK(r.exit_code == 1);
      CHECK_THAT(r.output, Catch::Contains("'unused.weight'") && Catch::Contains("find_unused_parameters"));
    }
    auto good = run_ranks(2, {"unused", "find_unused=1", dtype});
    for (auto& r : good) {
      INFO(dtype << ": " << r.output);
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("unused ok"));
    }
  }
}

TEST_CASE("ddp: when a rank dies mid-training the other fails with a message, well before the timeout", "[tsan][tsan-gloo]") {
  const int port = free_port();
  std::vector<std::unique_ptr<Proc>> procs;
  TempDir dir;
  for (int r = 0; r < 2; ++r) {
    auto env = rank_env(r, 2, port);
    env["DDP_TIMEOUT_S"] = "60";
    env["TORCHELASTIC_ERROR_FILE"] = dir.file("error." + std::to_string(r) + ".json");
    procs.push_back(std::make_unique<Proc>(std::vector<std::string>{helper_path(), "train-forever"}, env));
  }
  REQUIRE(wait_until([&] { return procs[0]->output().find("step 3") != std::string::npos &&
                                  procs[1]->output().find("step 3") != std::string::npos; },
                     60));
  const auto start = std::chrono::steady_clock::now();
  procs[1]->signal(SIGKILL);
  REQUIRE(procs[1]->wait(10) == 128 + SIGKILL);
  auto code = procs[0]->wait(30);  // the connection drop is seen at once; 30 s < the 60 s timeout
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(procs[0]->output());
  REQUIRE(code.has_value());
  CHECK(*code == 1);
  CHECK(took < 30);
  // The collective in flight (a bucket allreduce or the buffer broadcast) names itself.
  CHECK_THAT(procs[0]->output(), Catch::Contains("failed (a peer may have exited or timed out)"));
  // A sum through shared memory knows which peer died: rank 0's error file
  // then says it follows rank 1, so the launcher never names rank 0 the root
  // cause (rank 0 may write it before the launcher reaps rank 1).
  if (procs[0]->output().find("exited during a shared-memory allreduce") != std::string::npos) {
    INFO(read_file(dir.file("error.0.json")));
    auto rec = ddp::read_error_file(dir.file("error.0.json"));
    REQUIRE(rec.has_value());
    CHECK(rec->follows_rank == 1);
  }
}

// The failure tests bound each run well below the collective timeout: a rank
// left waiting for a peer that went on would only fail after DDP_TIMEOUT_S.
namespace {
constexpr double kFailFastS = 40;
const std::map<std::string, std::string> kTimeout60{{"DDP_TIMEOUT_S", "60"}};
}  // namespace

TEST_CASE("ddp: a throw inside a DDP hook on one rank fails its peer at once, and the ranks stay in step", "[tsan][tsan-gloo]") {
  auto ranks = run_ranks(2, {"hook-throw"}, kTimeout60, kFailFastS);
  for (auto& r : ranks) {
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("caught: ") && Catch::Contains("in step"));
  }
  CHECK_THAT(ranks[0].output, Catch::Contains("'emb.weight' has a sparse gradient"));
  CHECK_THAT(ranks[1].output, Catch::Contains("the backward pass failed on rank 0"));
}

TEST_CASE("ddp: a backward that throws after DDP hooks fired fails the peer at the next forward, and the ranks stay in step", "[tsan][tsan-gloo]") {
  auto ranks = run_ranks(2, {"backward-throws"}, kTimeout60, kFailFastS);
  for (auto& r : ranks) {
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("caught: ") && Catch::Contains("recovered"));
  }
  CHECK_THAT(ranks[0].output, Catch::Contains("deliberate failure in backward"));
  CHECK_THAT(ranks[1].output, Catch::Contains("the backward pass failed on rank 0"));
}

TEST_CASE("ddp: a backward that throws after every gradient was sent fails only that rank, and the ranks stay in step", "[tsan][tsan-gloo]") {
  auto ranks = run_ranks(2, {"throws-after-reduction"}, kTimeout60, kFailFastS);
  for (auto& r : ranks) {
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("recovered"));
  }
  CHECK_THAT(ranks[0].output, Catch::Contains("caught: ") && Catch::Contains("deliberate failure after the gradients"));
  CHECK_THAT(ranks[1].output, Catch::Contains("no error"));
}
