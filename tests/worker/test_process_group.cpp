// init_process_group and collectives with real processes: rendezvous,
// collectives on 2 and 3 ranks, the agent-store mode, an unreachable store,
// and a C++ rank sharing a Gloo group with a Python rank.
#include <catch2/catch.hpp>

#include <chrono>
#include <regex>
#include <string>
#include <utility>

#include "ddp/worker/compat.h"
#include "ddp/worker/process_group.h"
#include "reference_python.h"
#include "test_support.h"
#include "worker_test_util.h"
#include "test_skip.h"

using namespace ddp::test;

TEST_CASE("process group: collectives agree on 2 and 3 ranks", "[tsan]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    auto ranks = run_ranks(world, {"collectives"});
    for (auto& r : ranks) {
      INFO(r.output);
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("collectives ok"));
    }
  }
}

TEST_CASE("process group: on one machine float sums go through shared memory, bit-for-bit Gloo's on 2 ranks", "[tsan]") {
  for (int world : {2, 3}) {
    INFO("world " << world);
    auto ranks = run_ranks(world, {"shm"});
    for (auto& r : ranks) {
      INFO(r.output);
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("shm on") && Catch::Contains("shm buffers on") &&
                               Catch::Contains("shm ok on rank"));
    }
  }
}

TEST_CASE("process group: shared buffers take at most half of /dev/shm's free space") {
  // Both ranks in a mount namespace of their own with an 8 MiB /dev/shm: the
  // slots' segment takes 4 MiB of it, so about 2 MiB is the limit.
  if (run({"unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"}, {}, 10).exit_code != 0)
    DDP_SKIP("a mount namespace with a tmpfs of its own (unshare -m, mount) is not allowed here");
  auto in_small_shm = [](const std::string& floats) {
    return run({"unshare", "-m", "sh", "-c",
                "mount -t tmpfs -o size=8m tmpfs /dev/shm && exec \"$0\" --standalone --use_env --nproc_per_node=2 --no_python "
                "\"$1\" shm_room ddp=1 floats=" + floats,
                bin_path("ddp-launch"), helper_path()},
               {}, 60);
  };
  auto fits = in_small_shm("131072");  // 2 ranks x 0.5 MiB
  INFO(fits.output);
  CHECK(fits.exit_code == 0);
  CHECK_THAT(fits.output, Catch::Contains("buffers on") && Catch::Contains("ddp step done"));
  CHECK_THAT(fits.output, !Catch::Contains("stay in private memory"));
  auto big = in_small_shm("393216");  // 2 ranks x 1.5 MiB: free, but more than half of it
  INFO(big.output);
  CHECK(big.exit_code == 0);
  CHECK_THAT(big.output, Catch::Contains("buffers off: rank 0 would take 3145728 of the") &&
                             Catch::Contains("bytes free in /dev/shm (at most half)"));
  // DDP's buckets then stay private, still summed right, and rank 0 says why
  // and what to do, once (and nothing for a DDP without buckets, in both).
  CHECK_THAT(big.output, Catch::Contains("ddp step done"));
  const std::string note = "ddp_worker: note: DDP's gradient buckets stay in private memory: rank 0 would take ";
  CHECK_THAT(big.output, Catch::Contains(note) && Catch::Contains("bytes); each sum through shared memory then "
                                                                  "copies them in and out (more room in /dev/shm"));
  CHECK(big.output.find(note) == big.output.rfind(note));
}

TEST_CASE("process group: DDP_SHM_ALLREDUCE=0 keeps every rank's sums on Gloo", "[tsan]") {
  auto ranks = run_ranks(2, {"shm"}, {{"DDP_SHM_ALLREDUCE", "0"}});
  for (auto& r : ranks) {
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("shm off: rank 0 has DDP_SHM_ALLREDUCE=0"));
  }
}

TEST_CASE("process group: DDP_SHM_ALLREDUCE takes the usual boolean spellings and refuses others") {
  for (const char* off : {"false", "OFF", "no"}) {
    INFO(off);
    auto ranks = run_ranks(2, {"shm"}, {{"DDP_SHM_ALLREDUCE", off}});
    for (auto& r : ranks) {
      INFO(r.output);
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.output, Catch::Contains("shm off: rank 0 has DDP_SHM_ALLREDUCE=0"));  // =0: the store's flag
    }
  }
  auto on = run_ranks(2, {"shm"}, {{"DDP_SHM_ALLREDUCE", "Yes"}});
  for (auto& r : on) {
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("shm on"));
  }
  // A typo fails at start, before any rendezvous, naming the accepted values.
  auto env = rank_env(0, 2, free_port());
  env["DDP_SHM_ALLREDUCE"] = "disable";
  auto r = run({helper_path(), "init"}, env, 60);
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("DDP_SHM_ALLREDUCE: 'disable' is not a boolean; use 1/0, true/false, "
                                       "yes/no or on/off"));
}

TEST_CASE("process group: DDP_TIMEOUT_S beyond what the timers hold is refused, naming the value and the range") {
  auto env = rank_env(0, 1, free_port());
  for (const char* t : {"1e20", "2147484", "1e300"}) {
    env["DDP_TIMEOUT_S"] = t;
    auto r = run({helper_path(), "init"}, env, 60);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(std::string("DDP_TIMEOUT_S: ") + t + " is out of range") &&
                             Catch::Contains("2147483"));
  }
}

TEST_CASE("process group: DDP_TIMEOUT_S of 0 or below a millisecond is refused in seconds, naming the value") {
  // It used to read "process group timeout must be in (0, 2147483647] ms ..., got 0 ms".
  auto env = rank_env(0, 1, free_port());
  for (const char* t : {"0", "0.0004", "-0"}) {
    env["DDP_TIMEOUT_S"] = t;
    auto r = run({helper_path(), "init"}, env, 60);
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains(std::string("DDP_TIMEOUT_S: ") + t +
                                         " is out of range, expected seconds from 0.001 to 2147483 (24.8 days)") &&
                             !Catch::Contains(" ms"));
  }
}

TEST_CASE("process group: DDP_TIMEOUT_S takes seconds from 0.001 to 2147483, fractions to the millisecond") {
  // In process: a group that really waits 1 ms fails on a loaded machine
  // (c10d's poll times out), so the bounds are checked where they are read.
  using ms = std::chrono::milliseconds;
  const ddp::worker::InitOptions defaults;
  for (auto [text, want] : {std::pair<const char*, long long>{"0.001", 1}, {"2147483", 2147483000LL},
                            {"2.5", 2500}, {"60", 60000}}) {
    INFO(text);
    ScopedEnv scope("DDP_TIMEOUT_S", text);
    CHECK(ddp::worker::resolve_timeout(defaults) == ms(want));
  }
  ScopedEnv scope("DDP_TIMEOUT_S", "0.0004");
  CHECK_THROWS_WITH(ddp::worker::resolve_timeout(defaults), Catch::Contains("DDP_TIMEOUT_S: 0.0004 is out of range"));
  ddp::worker::InitOptions given;  // a timeout given in code wins over the variable
  given.timeout = ms(7);
  CHECK(ddp::worker::resolve_timeout(given) == ms(7));
}

TEST_CASE("process group: an unresolvable MASTER_ADDR fails at once, naming the host and the resolver's error") {
  // .invalid never resolves (RFC 6761). Both the host (rank 0) and a client.
  for (int rank : {0, 1}) {
    INFO("rank " << rank);
    auto env = rank_env(rank, 2, free_port());
    env["MASTER_ADDR"] = "no-such-host.invalid";
    env["DDP_TIMEOUT_S"] = "30";
    const auto start = std::chrono::steady_clock::now();
    auto r = run({helper_path(), "init"}, env, 60);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.output, Catch::Contains("MASTER_ADDR no-such-host.invalid does not resolve") &&
                             Catch::Contains("Name or service not known"));
    CHECK_THAT(r.output, !Catch::Contains("already in use"));
    CHECK(took < 15);  // not the 30 s timeout
  }
}

TEST_CASE("process group: legacy --local_rank argument and gloo device") {
  auto ranks = run_ranks(2, {"init", "--local_rank=0"}, {{"LOCAL_RANK", "\x01unset"}});
  for (auto& r : ranks) {
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, Catch::Contains("local 0 backend gloo device cpu"));
  }
}

TEST_CASE("process group: workers join the launcher's store when TORCHELASTIC_USE_AGENT_STORE=True") {
  // Play the agent: host a TCPStore the way torchelastic's agent does.
  const int port = free_port();
  auto opts = ddp::worker::compat::tcp_store_options(static_cast<std::uint16_t>(port), true, std::nullopt,
                                                     false, std::chrono::seconds(60));
  auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  std::vector<std::unique_ptr<Proc>> procs;
  for (int r = 0; r < 2; ++r) {
    auto env = rank_env(r, 2, port);
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    env["TORCHELASTIC_RESTART_COUNT"] = "3";
    procs.push_back(std::make_unique<Proc>(std::vector<std::string>{helper_path(), "collectives"}, env));
  }
  for (auto& p : procs) {
    INFO(p->output());
    CHECK(p->wait(90) == 0);
  }
  // The workers' keys live under the attempt prefix, as in Python: Gloo's
  // rendezvous keys of both ranks, in the backend's scope of this version.
  auto attempt = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_3", agent);
  auto scoped = ddp::worker::compat::backend_store(c10::make_intrusive<c10d::PrefixStore>("default_pg", attempt), "cpu");
  using ddp::worker::compat::gloo_rank_key;
  using ddp::worker::compat::kLibTorch;
  CHECK(scoped->check({gloo_rank_key(kLibTorch, 0), gloo_rank_key(kLibTorch, 1)}));
}

namespace {

// Seconds the helper takes to start, refuse DDP_BACKEND=mpi before any
// connection and exit: the part of a timed run that is not the wait, measured
// under the machine's load of the moment (and the sanitizers' start and exit).
double helper_start_and_exit_s() {
  auto env = rank_env(0, 1, free_port());
  env["DDP_BACKEND"] = "mpi";
  const auto start = std::chrono::steady_clock::now();
  auto r = run({helper_path(), "init"}, env, 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 1);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("process group: an unreachable store times out within the timeout with host:port and the count") {
  // The bounds below are the timeout plus what a run that fails at once
  // takes now, plus 2 s: a fixed 2.5 s for start and exit was thin on a
  // loaded machine, and under ASan (LeakSanitizer scans at exit).
  const double overhead = helper_start_and_exit_s();
  INFO("start and exit " << overhead << " s");
  const int port = free_port();  // nobody listens there
  auto env = rank_env(1, 2, port);
  env["DDP_TIMEOUT_S"] = "3";
  const auto start = std::chrono::steady_clock::now();
  auto r = run({helper_path(), "init"}, env, 60);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(r.output, Catch::Contains("timeout of 3 s"));
  CHECK_THAT(r.output, Catch::Contains("ranks joined"));
  // The timeout plus process start-up: not 30 minutes, and not the few
  // seconds LibTorch 2.x's connect back-off used to add after it (6.1 s here,
  // 3.1 s past the timeout).
  CHECK(took < 3 + overhead + 2);

  // Rank 0 hosts the store but its peer never comes: it reports 1/2.
  auto env0 = rank_env(0, 2, free_port());
  env0["DDP_TIMEOUT_S"] = "2";
  const auto start0 = std::chrono::steady_clock::now();
  auto r0 = run({helper_path(), "init"}, env0, 60);
  const double took0 = std::chrono::duration<double>(std::chrono::steady_clock::now() - start0).count();
  INFO(r0.output);
  CHECK(r0.exit_code == 1);
  CHECK_THAT(r0.output, Catch::Contains("1/2 ranks joined, missing rank 1"));
  CHECK_THAT(r0.output, Catch::Contains("timeout of 2 s"));
  CHECK(took0 < 2 + overhead + 2);
}

TEST_CASE("process group: bad DDP_BACKEND and DDP_TIMEOUT_S are named") {
  auto env = rank_env(0, 1, free_port());
  env["DDP_BACKEND"] = "mpi";
  auto r = run({helper_path(), "init"}, env, 60);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("DDP_BACKEND: unknown backend 'mpi'"));
  env["DDP_BACKEND"] = "gloo";
  env["DDP_TIMEOUT_S"] = "soon";
  r = run({helper_path(), "init"}, env, 60);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("DDP_TIMEOUT_S: 'soon'"));
}

TEST_CASE("process group: a C++ rank and a Python rank agree on an allreduce") {
  DDP_REFERENCE_PYTHON_OR_SKIP(py);
  for (int cpp_rank : {0, 1}) {
    INFO("C++ is rank " << cpp_rank);
    const int port = free_port();
    Proc cpp({helper_path(), "interop"}, rank_env(cpp_rank, 2, port));
    Proc python({py, source_path("tests/worker/interop_rank.py")}, rank_env(1 - cpp_rank, 2, port));
    auto c = cpp.wait(120), p = python.wait(120);
    INFO("C++: " << cpp.output());
    INFO("Python: " << python.output());
    REQUIRE(c == 0);
    REQUIRE(p == 0);
    // 1 + 2 on both, and the gather in rank order.
    CHECK_THAT(cpp.output(), Catch::Contains("result 3 3 gather 0 10"));
    CHECK_THAT(python.output(), Catch::Contains("result 3 3 gather 0 10"));
  }
}
