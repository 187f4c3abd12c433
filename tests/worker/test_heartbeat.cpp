// The runtime's progress heartbeat (DDP_HEARTBEAT_FILE, worker/src/heartbeat_recorder.h)
// with 2 real ranks: every collective counted on every path, the step, a rank
// stuck in a collective, and a heartbeat file that cannot be used; and
// ddp-train's step.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/common/heartbeat.h"
#include "fashion_fixture.h"
#include "test_support.h"
#include "worker_test_util.h"

using namespace ddp::test;
using ddp::CollectiveKind;
using ddp::Heartbeat;

namespace {

// IDX files of 64 training and 16 test images (ddp-train's data, tiny).
void write_tiny_fashion_mnist(const std::string& dir) {
  auto bytes = [](std::uint32_t n, bool images) {
    std::vector<std::uint8_t> b(images ? n * 28 * 28 : n);
    for (std::uint32_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(images ? i * 7 : i % 10);
    return b;
  };
  write_gz(dir + "/train-images-idx3-ubyte.gz", idx_bytes(8, {64, 28, 28}, bytes(64, true)));
  write_gz(dir + "/train-labels-idx1-ubyte.gz", idx_bytes(8, {64}, bytes(64, false)));
  write_gz(dir + "/t10k-images-idx3-ubyte.gz", idx_bytes(8, {16, 28, 28}, bytes(16, true)));
  write_gz(dir + "/t10k-labels-idx1-ubyte.gz", idx_bytes(8, {16}, bytes(16, false)));
}

struct Job {
  TempDir dir;
  std::vector<std::unique_ptr<Heartbeat>> pages;  // the launcher's side
  std::vector<std::unique_ptr<Proc>> procs;

  // `world` ranks (2 by default) of `program` (the helper's heartbeat mode
  // by default) with `args`, each with its own page, as ddp-launch gives them.
  Job(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra = {}, int world = 2,
      std::vector<std::string> program = {helper_path(), "heartbeat"}) {
    const int port = free_port();
    for (int r = 0; r < world; ++r) {
      const std::string path = dir.file("heartbeat." + std::to_string(r));
      pages.push_back(Heartbeat::create(path));
      auto env = rank_env(r, world, port);
      env["DDP_HEARTBEAT_FILE"] = path;
      for (const auto& [k, v] : extra) env[k] = v;
      std::vector<std::string> argv = program;
      argv.insert(argv.end(), args.begin(), args.end());
      procs.push_back(std::make_unique<Proc>(argv, env));
    }
  }
  void finish() {
    for (auto& p : procs) {
      auto code = p->wait(90);
      INFO(p->output());
      REQUIRE(code == 0);
    }
  }
};

int printed_int(const std::string& out, const std::string& pattern) {
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex(pattern)));
  return std::stoi(m[1]);
}

}  // namespace

TEST_CASE("heartbeat: the runtime counts every collective it issues, on shared memory and on Gloo") {
  const std::string shm = GENERATE(std::string("1"), std::string("0"));
  INFO("DDP_SHM_ALLREDUCE=" << shm);
  Job job({"steps=0"}, {{"DDP_SHM_ALLREDUCE", shm}});
  job.finish();
  for (int r = 0; r < 2; ++r) {
    const auto out = job.procs[r]->output();
    INFO("rank " << r << ": " << out);
    const int issued = printed_int(out, "issued (\\d+)");
    const auto s = job.pages[r]->read();
    CHECK(s.pid == static_cast<uint64_t>(job.procs[r]->pid()));
    CHECK(s.collective_started == static_cast<uint64_t>(issued));
    CHECK(s.collective_finished == s.collective_started);
    CHECK(s.kind == CollectiveKind::Broadcast);  // the last one the helper issued
    CHECK(s.bytes == 40);
    CHECK(s.step == 0);  // no training_step call
  }
}

TEST_CASE("heartbeat: DDP's collectives and the training step are recorded") {
  Job job({"steps=4"});
  job.finish();
  for (int r = 0; r < 2; ++r) {
    const auto out = job.procs[r]->output();
    INFO("rank " << r << ": " << out);
    const int issued = printed_int(out, "issued (\\d+)");
    // Every step issues the same collectives: at least a bucket allreduce
    // and the buffer broadcast (the model has a buffer).
    const int per_step = printed_int(out, "step 1 collectives (\\d+)");
    CHECK(per_step >= 2);
    for (int k = 2; k <= 4; ++k) CHECK(printed_int(out, "step " + std::to_string(k) + " collectives (\\d+)") == per_step);
    const auto s = job.pages[r]->read();
    CHECK(s.step == 4);
    // The fixed part, DDP's construction (parameter check, broadcast), 4 steps.
    CHECK(s.collective_started > static_cast<uint64_t>(issued + 4 * per_step));
    CHECK(s.collective_finished == s.collective_started);
    CHECK(s.kind == CollectiveKind::Allreduce);  // a step ends with its gradient sums
  }
}

TEST_CASE("heartbeat: a group of one rank issues no collective at all, and its page still shows every step") {
  // issue 25 item 1: world size 1 paid Gloo for every sum of one value (the
  // gradient buckets, the loss check, the status exchange).
  Job job({"steps=4"}, {}, 1);
  job.finish();
  const auto out = job.procs[0]->output();
  INFO(out);
  CHECK(printed_int(out, "issued (\\d+)") > 10);  // asked for every kind and path...
  for (int k = 1; k <= 4; ++k) CHECK(printed_int(out, "step " + std::to_string(k) + " collectives (\\d+)") == 0);
  const auto s = job.pages[0]->read();
  CHECK(s.collective_started == 0);  // ...and none was issued
  CHECK(s.step == 4);
}

TEST_CASE("heartbeat: a rank waiting in a collective for a late peer shows it, with kind and size") {
  const std::string shm = GENERATE(std::string("1"), std::string("0"));
  INFO("DDP_SHM_ALLREDUCE=" << shm);
  TempDir gate;
  const std::string go = gate.file("go");
  Job job({"steps=2", "stuck=1", "late=1", "go=" + go}, {{"DDP_SHM_ALLREDUCE", shm}});
  // Rank 0 enters the last allreduce (1000 floats) and waits for rank 1,
  // which has not joined: outside any collective, one behind.
  // Waits for that state as a whole: a 4000-byte allreduce of an earlier
  // step that rank 0 waits in briefly under load is not it (seen under ctest -j2).
  const bool stuck = wait_until(
      [&] {
        const auto s = job.pages[0]->read(), late = job.pages[1]->read();
        return s.step == 2 && s.in_collective() && s.bytes == 4000 && !late.in_collective() &&
               late.collective_finished + 1 == s.collective_started;
      },
      60);
  INFO(job.procs[0]->output() << job.procs[1]->output());
  REQUIRE(stuck);
  const auto s0 = job.pages[0]->read(), s1 = job.pages[1]->read();
  CHECK(s0.collective_started == s0.collective_finished + 1);
  CHECK(s0.kind == CollectiveKind::Allreduce);
  CHECK(s0.step == 2);
  CHECK_FALSE(s1.in_collective());
  CHECK(s1.collective_finished == s0.collective_finished);
  write_file(go, "");
  job.finish();
  for (int r = 0; r < 2; ++r) {
    const auto s = job.pages[r]->read();
    CHECK(s.collective_started == s0.collective_started);
    CHECK(s.collective_finished == s.collective_started);
  }
}

TEST_CASE("heartbeat: a DDP_HEARTBEAT_FILE that cannot be used is one warning, and the run goes on") {
  TempDir dir;
  const std::string missing = dir.file("no-such-dir/heartbeat");
  write_file(dir.file("foreign"), std::string(4096, 'x'));
  const std::string which = GENERATE(std::string("missing"), std::string("foreign"));
  const std::string path = which == "missing" ? missing : dir.file("foreign");
  auto ranks = run_ranks(2, {"heartbeat", "steps=0"}, {{"DDP_HEARTBEAT_FILE", path}});
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << ranks[r].output);
    CHECK(ranks[r].exit_code == 0);
    CHECK_THAT(ranks[r].output, Catch::Contains("heartbeat ok on rank " + std::to_string(r)));
    CHECK_THAT(ranks[r].output, Catch::Contains("ddp_worker: warning: rank " + std::to_string(r) + ": ") &&
                                    Catch::Contains(path) &&
                                    Catch::Contains("training continues without progress heartbeats"));
    const std::string why = path == missing ? "No such file or directory" : "wrong magic";
    CHECK_THAT(ranks[r].output, Catch::Contains(why));
    // One line, once.
    const auto first = ranks[r].output.find("ddp_worker: warning");
    CHECK(ranks[r].output.find("ddp_worker: warning", first + 1) == std::string::npos);
  }
  CHECK(read_file(dir.file("foreign")) == std::string(4096, 'x'));  // untouched
}

TEST_CASE("heartbeat: ddp-train reports its global step, and 1 process issues no collective") {
  TempDir dir;
  write_tiny_fashion_mnist(dir.file(""));
  const std::string path = dir.file("heartbeat.0");
  auto page = Heartbeat::create(path);
  auto env = rank_env(0, 1, free_port());
  env["DDP_HEARTBEAT_FILE"] = path;
  // 2 epochs of 3 steps: the step keeps counting across the epochs.
  auto res = run({bin_path("ddp-train"), "--epochs=2", "--max_steps=3", "--batch_size=8", "--data_dir=" + dir.path(),
                  "--checkpoint_dir=" + dir.file("ck")},
                 env, 120);
  INFO(res.output);
  REQUIRE(res.exit_code == 0);
  const auto s = page->read();
  CHECK(s.step == 6);
  // World size 1: no collective at all (issue 25), the steps still counted.
  CHECK(s.collective_started == 0);
  CHECK(s.collective_finished == 0);
}

TEST_CASE("heartbeat: 2-process ddp-train broadcasts nothing per step: each step is its gradient sums and the loss check") {
  // issue 25 item 2: a model without buffers pays no broadcast at each
  // forward (Python DDP's broadcast_buffers with no buffers).
  TempDir data;
  write_tiny_fashion_mnist(data.file(""));
  // 2 epochs of 3 steps (8 samples a rank a step).
  Job job({"--epochs=2", "--max_steps=3", "--batch_size=8", "--data_dir=" + data.path(),
           "--checkpoint_dir=" + data.file("ck")},
          {}, 2, {bin_path("ddp-train")});
  job.finish();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    uint64_t next_step = 0, next_coll = 1;
    std::vector<ddp::StepMark> steps;
    std::vector<ddp::CollectiveMark> colls;
    REQUIRE(job.pages[r]->read_steps(next_step, steps) == 0);
    REQUIRE(job.pages[r]->read_collectives(next_coll, colls) == 0);
    REQUIRE(steps.size() == 6);
    std::ostringstream seen;
    for (const auto& c : colls) seen << ddp::collective_kind_name(c.kind) << " " << c.bytes << " at " << c.start_ns << "\n";
    INFO("step 1 at " << steps[0].start_ns << "; collectives:\n" << seen.str());
    // A step's collectives, from its start: the forward's (none), then the
    // gradient buckets' sums and the loss check. The same for every step;
    // the epoch's last step is followed by the evaluation's, so only the
    // steps inside an epoch end where the next begins.
    auto from = [&](size_t k) {
      std::vector<const ddp::CollectiveMark*> in;
      for (const auto& c : colls)
        if (c.start_ns >= steps[k].start_ns && (k + 1 == steps.size() || c.start_ns < steps[k + 1].start_ns))
          in.push_back(&c);
      return in;
    };
    const auto first = from(0);
    CHECK(first.size() >= 2);  // at least one gradient bucket and the loss check
    for (size_t k = 0; k < steps.size(); ++k) {
      INFO("step " << k + 1);
      const auto in = from(k);
      if (k != 2 && k != 5) CHECK(in.size() == first.size());
      REQUIRE(in.size() >= first.size());
      for (size_t i = 0; i < first.size(); ++i) {
        CHECK(in[i]->kind == CollectiveKind::Allreduce);
        CHECK(in[i]->bytes == first[i]->bytes);
      }
    }
  }
}
