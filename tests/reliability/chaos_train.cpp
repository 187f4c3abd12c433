// Chaos on a real training job: ddp-train, 2 processes under ddp-launch,
// short deterministic runs (2 epochs x --max_steps 4, seed 11, shuffled), and
// one fault each, at a point drawn from the printed seed:
//   a worker SIGKILLed, SIGSEGVed or stopped (SIGSTOP) at a random step, a
//   worker that throws, rank 0 SIGKILLed while it writes a checkpoint, the
//   launcher SIGKILLed or SIGTERMed, the master port taken, a rank whose
//   program cannot be executed.
// With --max_restarts=2 (two faults, one per attempt) the job ends with the
// undisturbed run's final weights, bit for bit (ddp-train replays the
// interrupted epoch from the last checkpoint in the same order, and the
// shared-memory sums are in rank order). With --max_restarts=0 it stops with
// the root cause's exit code and rank, and leaves no process (alive or
// zombie), no file in its TMPDIR and no /dev/shm segment (sandbox.h).
// DDP_RELIABILITY_LONG=1 repeats the restart cases (DDP_RELIABILITY_ROUNDS,
// default 3) at other random points.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <arpa/inet.h>
#include <csignal>
#include <filesystem>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "chaos_common.h"
#include "fashion_fixture.h"
#include "create_watch.h"
#include "ddp/worker/checkpoint.h"
#include "sandbox.h"
#include "test_skip.h"
#include "test_support.h"

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 4;    // per epoch
constexpr int kEpochs = 2;
constexpr double kRunTimeout = 240;  // a whole job, on a loaded 2-core machine

std::vector<std::string> train_args(const std::string& dir) {
  return {bin_path("ddp-train"), "--epochs=" + std::to_string(kEpochs), "--max_steps=" + std::to_string(kSteps),
          "--seed=11", "--batch_size=32", "--log_interval=1", "--lr_patience=0", "--lr_factor=0.5",
          "--data_dir=" + small_fashion_dir(), "--checkpoint_dir=" + dir + "/ck", "--save_final=" + dir + "/final.pt"};
}

std::vector<std::string> launcher(int max_restarts, const std::vector<std::string>& program,
                                  std::vector<std::string> extra = {"--standalone"}) {
  // --recovery restart: these cases are the full restart's (in-place
  // recovery has its own, tests/train/test_in_place_recovery.cpp).
  std::vector<std::string> argv = {bin_path("ddp-launch"), "--nproc_per_node=2",
                                   "--max_restarts=" + std::to_string(max_restarts), "--recovery=restart"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::map<std::string, std::string> job_env(const Sandbox& sb, const std::string& timeout_s = "60") {
  return sb.env({{"OMP_NUM_THREADS", "1"}, {"DDP_TIMEOUT_S", timeout_s}});
}

// The undisturbed run's final weights (run once per test process).
const std::string& reference_weights() {
  static TempDir dir;
  static const std::string path = [] {
    const auto r = run(launcher(0, train_args(dir.path())), {{"OMP_NUM_THREADS", "1"}, {"TMPDIR", dir.path()}},
                       kRunTimeout);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return dir.file("final.pt");
  }();
  return path;
}

// Empty when the two weight files hold the same tensors bit for bit; else
// what differs.
std::string weights_difference(const std::string& a_path, const std::string& b_path) {
  auto a = ddp::worker::load_weights(a_path);
  auto b = ddp::worker::load_weights(b_path);
  if (a.size() != b.size()) return "different tensor counts";
  std::string diff;
  for (const auto& item : b) {
    const at::Tensor* other = a.find(item.key());
    if (!other) return "missing " + item.key();
    if (other->sizes() != item.value().sizes()) return "shape of " + item.key();
    if (!torch::equal(*other, item.value()))
      diff += item.key() + " max |diff| " +
              std::to_string((other->to(torch::kDouble) - item.value().to(torch::kDouble)).abs().max().item<double>()) +
              "; ";
  }
  return diff;
}

// A point of the run: rank 0 printed "epoch E/2 step S/4".
struct Point {
  int epoch, step, rank;
  std::string text() const { return "epoch " + std::to_string(epoch) + "/" + std::to_string(kEpochs) + " step " +
                                    std::to_string(step) + "/" + std::to_string(kSteps) + " "; }
  std::string name() const { return "rank " + std::to_string(rank) + " at epoch " + std::to_string(epoch) + " step " +
                                    std::to_string(step); }
};

Point random_point(std::mt19937_64& rng, int min_epoch = 1) {
  std::uniform_int_distribution<int> epoch(min_epoch, kEpochs), step(1, kSteps), rank(0, 1);
  return {epoch(rng), step(rng), rank(rng)};
}

// Output offset where attempt `attempt` begins (0 for the first): after the
// launcher's "(restart N of" line.
std::optional<size_t> attempt_start(Proc& p, int attempt, double timeout_s) {
  if (attempt == 0) return 0;
  std::optional<size_t> at;
  const std::string line = "(restart " + std::to_string(attempt) + " of";
  wait_until(
      [&] {
        const auto pos = p.output().find(line);
        if (pos != std::string::npos) at = pos;
        return at.has_value() || !p.running();
      },
      timeout_s);
  return at;
}

bool wait_for_text(Proc& p, const std::string& text, size_t from, double timeout_s) {
  return wait_until([&] { return p.output().find(text, from) != std::string::npos || !p.running(); }, timeout_s) &&
         p.output().find(text, from) != std::string::npos;
}

// Sends `sig` to rank point.rank of attempt `attempt` once rank 0 printed the point.
void fault_at(Proc& p, const Sandbox& sb, int attempt, const Point& point, int sig) {
  const auto from = attempt_start(p, attempt, kRunTimeout);
  INFO(p.output());
  REQUIRE(from);
  const auto pid = sb.wait_for({{"RANK", std::to_string(point.rank)},
                                {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)}},
                               kRunTimeout);
  REQUIRE(pid);
  REQUIRE(wait_for_text(p, point.text(), *from, kRunTimeout));
  ::kill(*pid, sig);
}

// SIGKILLs rank 0 of attempt `attempt` the moment it creates a checkpoint's
// temp file. Returns whether the temp file was still there just after the
// kill (the kill landed during the write, not after the rename).
bool kill_during_checkpoint_write(Proc& p, const Sandbox& sb, int attempt, const std::string& ck_dir) {
  fs::create_directories(ck_dir);
  CreateWatch watch(ck_dir);
  const auto from = attempt_start(p, attempt, kRunTimeout);
  REQUIRE(from);
  const auto pid = sb.wait_for({{"RANK", "0"}, {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)}}, kRunTimeout);
  REQUIRE(pid);
  // The temp file names its writer's pid: an event of an earlier attempt's
  // write is not this one.
  const auto name = watch.wait(".pt.tmp." + std::to_string(*pid), kRunTimeout);
  REQUIRE(name);
  ::kill(*pid, SIGKILL);
  return fs::exists(ck_dir + "/" + *name);
}

std::vector<std::string> temp_files_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find(".tmp.") != std::string::npos) out.push_back(it->path().string());
  return out;
}

void check_nothing_left(Sandbox& sb, const std::string& output, bool allow_zombies = false, double settle_s = 0) {
  const Leftovers l = sb.leftovers(allow_zombies, settle_s, output);
  INFO("left behind:\n" << l.describe());
  CHECK(l.empty());
}

// A job that must fail: exit code, root-cause rank, nothing left.
void check_failed(Sandbox& sb, Proc& p, int code, std::optional<int> rank) {
  const auto got = p.wait(kRunTimeout);
  const std::string out = p.output();
  INFO(out);
  REQUIRE(got);  // no hang
  CHECK(*got == code);
  if (rank) {
    CHECK(root_cause_rank(out) == rank);
    CHECK(root_cause_exit_code(out) == std::optional<int>(code));
  }
  check_nothing_left(sb, p.output());
}

int rounds() { return long_variant() ? static_cast<int>(env_count("DDP_RELIABILITY_ROUNDS", 3)) : 1; }

}  // namespace

TEST_CASE("chaos --max_restarts=2: a worker SIGKILLed at a random step, then one SIGSEGVed, end with the "
          "undisturbed run's weights bit for bit",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  const std::string& ref = reference_weights();
  auto rng = case_rng("restart-kill-segv");
  for (int round = 0; round < rounds(); ++round) {
    Sandbox sb("restart-kill-segv");
    Stopwatch clock;
    const Point first = random_point(rng), second = random_point(rng, 2);
    INFO("SIGKILL of " << first.name() << " (attempt 0), SIGSEGV of " << second.name() << " (attempt 1)");
    Proc p(sb.wrap(launcher(2, train_args(sb.work()))), job_env(sb));
    fault_at(p, sb, 0, first, SIGKILL);
    fault_at(p, sb, 1, second, SIGSEGV);
    const auto code = p.wait(kRunTimeout);
    INFO(p.output());
    REQUIRE(code == std::optional<int>(0));
    CHECK_THAT(p.output(), Catch::Contains("rank " + std::to_string(first.rank) + " signal 9 (SIGKILL); restarting") &&
                               Catch::Contains("rank " + std::to_string(second.rank) +
                                               " signal 11 (SIGSEGV); restarting the group (restart 2 of 2)"));
    const std::string diff = weights_difference(sb.work("final.pt"), ref);
    INFO("weights differ: " << diff);
    CHECK(diff.empty());
    check_nothing_left(sb, p.output());
    print_result("restart: SIGKILL " + first.name() + ", SIGSEGV " + second.name(),
                 diff.empty() ? "same weights" : "weights differ", clock.seconds());
  }
}

TEST_CASE("chaos --max_restarts=2: a worker stopped with SIGSTOP, then rank 0 killed during a checkpoint write, "
          "end with the undisturbed run's weights and no partial checkpoint",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  const std::string& ref = reference_weights();
  auto rng = case_rng("restart-stop-ckpt");
  for (int round = 0; round < rounds(); ++round) {
    Sandbox sb("restart-stop-ckpt");
    Stopwatch clock;
    const Point stop = random_point(rng);
    INFO("SIGSTOP of " << stop.name() << " (attempt 0), SIGKILL of rank 0 in a checkpoint write (attempt 1)");
    // The stopped worker's peer waits in a collective until DDP_TIMEOUT_S.
    Proc p(sb.wrap(launcher(2, train_args(sb.work()))), job_env(sb, "10"));
    fault_at(p, sb, 0, stop, SIGSTOP);
    const bool mid_write = kill_during_checkpoint_write(p, sb, 1, sb.work("ck"));
    const auto code = p.wait(kRunTimeout);
    INFO(p.output());
    REQUIRE(code == std::optional<int>(0));
    CHECK_THAT(p.output(), Catch::Contains("restart 1 of 2") &&
                               Catch::Contains("rank 0 signal 9 (SIGKILL); restarting the group (restart 2 of 2)"));
    const std::string diff = weights_difference(sb.work("final.pt"), ref);
    INFO("weights differ: " << diff);
    CHECK(diff.empty());
    // A kill during the write leaves no partial file beside the checkpoints.
    const auto partial = temp_files_in(sb.work("ck"));
    INFO("partial checkpoint files: " << partial.size() << (partial.empty() ? "" : " e.g. " + partial[0]));
    CHECK(partial.empty());
    check_nothing_left(sb, p.output());
    print_result("restart: SIGSTOP " + stop.name() + ", SIGKILL rank 0 " +
                     (mid_write ? "during" : "right after") + " a checkpoint write",
                 diff.empty() ? "same weights" : "weights differ", clock.seconds());
  }
}

TEST_CASE("chaos --max_restarts=0: a worker SIGKILLed or SIGSEGVed at a random step stops the job with its "
          "signal's code and rank, nothing left behind",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  auto rng = case_rng("no-restart-signals");
  // Both in the long variant; one of them, drawn, in the default one.
  std::vector<int> sigs = {SIGKILL, SIGSEGV};
  if (!long_variant()) sigs = {sigs[rng() % 2]};
  for (int sig : sigs) {
    DYNAMIC_SECTION("signal " << sig) {
      Sandbox sb("no-restart-signal");
      Stopwatch clock;
      const Point point = random_point(rng);
      INFO("signal " << sig << " to " << point.name());
      Proc p(sb.wrap(launcher(0, train_args(sb.work()))), job_env(sb));
      fault_at(p, sb, 0, point, sig);
      check_failed(sb, p, 128 + sig, point.rank);
      print_result(std::string(sig == SIGKILL ? "SIGKILL " : "SIGSEGV ") + point.name(),
                   "exit " + std::to_string(128 + sig), clock.seconds());
    }
  }
}

TEST_CASE("chaos --max_restarts=0: a worker that throws stops the job with exit code 1, its rank and its message",
          "[reliability][chaos]") {
  // ddp-train has no way to throw on demand: the runtime's test helper does
  // (mode throw, under run_main like ddp-train); the other rank waits for it
  // in the process group's set-up.
  Sandbox sb("throw");
  Stopwatch clock;
  const int rank = static_cast<int>(case_rng("throw")() % 2);
  const std::string script = "if [ \"$RANK\" = " + std::to_string(rank) + " ]; then exec \"$0\" throw; fi; exec \"$0\" train-forever";
  Proc p(sb.wrap(launcher(0, {"/bin/sh", "-c", script, bin_path("ddp-worker-test-helper")}, {"--standalone", "--use_env"})),
         job_env(sb));
  check_failed(sb, p, 1, rank);
  CHECK_THAT(p.output(), Catch::Contains("deliberate failure from rank " + std::to_string(rank)));
  print_result("rank " + std::to_string(rank) + " throws", "exit 1", clock.seconds());
}

TEST_CASE("chaos --max_restarts=0: a worker stopped with SIGSTOP fails the job within DDP_TIMEOUT_S, and the "
          "report names the stopped rank",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  Sandbox sb("stop");
  auto rng = case_rng("stop");
  const Point point = random_point(rng);
  INFO("SIGSTOP of " << point.name());
  Proc p(sb.wrap(launcher(0, train_args(sb.work()))), job_env(sb, "10"));
  fault_at(p, sb, 0, point, SIGSTOP);
  Stopwatch clock;
  // The peer's collective times out after 10 s; the launcher's teardown
  // wakes the stopped worker (SIGCONT) and ends it.
  const auto code = p.wait(10 + 60);
  const std::string out = p.output();
  INFO(out);
  REQUIRE(code);
  CHECK(*code == 1);
  CHECK_THAT(out, Catch::Contains("timed out") || Catch::Contains("Timed out"));
  const std::string r = std::to_string(point.rank);
  CHECK_THAT(out, Catch::Contains("rank " + r + " (local_rank " + r + ", pid") && Catch::Contains("is stopped by SIGSTOP"));
  check_nothing_left(sb, p.output());
  print_result("SIGSTOP " + point.name(), "exit " + std::to_string(*code) + " after DDP_TIMEOUT_S=10", clock.seconds());
}

TEST_CASE("chaos --max_restarts=0: rank 0 SIGKILLed during a checkpoint write stops the job with 137 and rank 0",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  Sandbox sb("ckpt-kill");
  Stopwatch clock;
  Proc p(sb.wrap(launcher(0, train_args(sb.work()))), job_env(sb));
  const bool mid_write = kill_during_checkpoint_write(p, sb, 0, sb.work("ck"));
  check_failed(sb, p, 137, 0);
  // The last good state is intact: no epoch_N.pt is half written.
  for (const auto& f : fs::directory_iterator(sb.work("ck")))
    if (f.path().extension() == ".pt") CHECK_NOTHROW(ddp::worker::load_checkpoint(f.path().string(), torch::kCPU));
  print_result(std::string("SIGKILL rank 0 ") + (mid_write ? "during" : "right after") + " a checkpoint write",
               "exit 137", clock.seconds());
}

TEST_CASE("chaos: the launcher SIGKILLed mid-training leaves no worker, run directory or segment behind",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  Sandbox sb("launcher-kill");
  auto rng = case_rng("launcher-kill");
  const Point point = random_point(rng);
  Proc p(sb.wrap(launcher(0, train_args(sb.work()))), job_env(sb));
  REQUIRE(sb.wait_for({{"RANK", "1"}}, kRunTimeout));
  REQUIRE(wait_for_text(p, point.text(), 0, kRunTimeout));
  Stopwatch clock;
  p.signal(SIGKILL);
  REQUIRE(p.wait(30) == std::optional<int>(137));
  // The watchdog outlives the launcher by design, ends the workers and
  // removes the run directory, then exits; its zombie is init's to reap.
  check_nothing_left(sb, p.output(), /*allow_zombies=*/true, /*settle_s=*/20);
  print_result("launcher SIGKILL at epoch " + std::to_string(point.epoch) + " step " + std::to_string(point.step),
               "nothing left", clock.seconds());
}

TEST_CASE("chaos: the launcher SIGTERMed mid-training forwards it, exits 143 and leaves nothing behind",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  Sandbox sb("launcher-term");
  auto rng = case_rng("launcher-term");
  const Point point = random_point(rng);
  Proc p(sb.wrap(launcher(0, train_args(sb.work()))), job_env(sb));
  REQUIRE(sb.wait_for({{"RANK", "1"}}, kRunTimeout));
  REQUIRE(wait_for_text(p, point.text(), 0, kRunTimeout));
  Stopwatch clock;
  p.signal(SIGTERM);
  const auto code = p.wait(60);
  INFO(p.output());
  REQUIRE(code);
  CHECK(*code == 143);
  CHECK_THAT(p.output(), Catch::Contains("stopped by SIGTERM"));
  check_nothing_left(sb, p.output());
  print_result("launcher SIGTERM at epoch " + std::to_string(point.epoch) + " step " + std::to_string(point.step),
               "exit 143", clock.seconds());
}

TEST_CASE("chaos: a taken master port is exit code 2 and one line naming it, before any worker starts",
          "[reliability][chaos]") {
  Sandbox sb("port-taken");
  // A listening socket of ours on the port: really taken, not a guess.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(fd, 1) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  Stopwatch clock;
  Proc p(sb.wrap(launcher(0, {bin_path("ddp-train"), "--max_steps=1"},
                          {"--master_addr=127.0.0.1", "--master_port=" + std::to_string(port)})),
         job_env(sb));
  const auto code = p.wait(60);
  ::close(fd);
  INFO(p.output());
  REQUIRE(code);
  CHECK(*code == 2);
  CHECK_THAT(p.output(), Catch::Contains(std::to_string(port)) && Catch::Contains("ddp-launch: error:"));
  CHECK_THAT(p.output(), !Catch::Contains("ddp-train: world size"));
  check_nothing_left(sb, p.output());
  print_result("master port taken", "exit " + std::to_string(*code), clock.seconds());
}

TEST_CASE("chaos: a rank whose program cannot be executed stops the job with 127 and names that rank",
          "[reliability][chaos][train]") {
  DDP_REQUIRE_FASHION_DATA();
  Sandbox sb("never-starts");
  Stopwatch clock;
  // Rank 1 never starts ddp-train: its exec fails (the path does not exist
  // on its "node"); rank 0 starts and waits for it in the rendezvous.
  auto train = train_args(sb.work());
  const std::string script = "if [ \"$RANK\" = 1 ]; then exec /nonexistent/ddp-train \"$@\"; fi; exec \"$0\" \"$@\"";
  std::vector<std::string> program = {"/bin/sh", "-c", script};
  program.insert(program.end(), train.begin(), train.end());
  Proc p(sb.wrap(launcher(0, program, {"--standalone", "--use_env"})), job_env(sb));
  check_failed(sb, p, 127, 1);
  print_result("rank 1 cannot exec its program", "exit 127", clock.seconds());
}
