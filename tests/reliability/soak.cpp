// Soak: many consecutive short launches (2 shell workers; every 20th the
// runtime's test helper, which sets up a process group and its /dev/shm
// segment, and half of those have the launcher SIGKILLed the moment the
// segment appears), each with one fault drawn from the printed seed, or none. Every
// launch is bounded; after each: its exit code is the root cause's (the
// worker's code, 128+signal, the launcher's own signal), the report names the
// root cause's rank, and nothing is left (sandbox.h). DDP_SOAK_LAUNCHES sets
// the count (default 200; 1000 with DDP_RELIABILITY_LONG=1);
// DDP_RELIABILITY_SEED replays a run.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <sstream>
#include <thread>

#include "chaos_common.h"
#include "create_watch.h"
#include "sandbox.h"
#include "test_support.h"

using namespace ddp::test;
namespace fs = std::filesystem;

namespace {

constexpr double kLaunchTimeout = 60;  // one launch; any more is a hang

enum class Fault {
  none, exit_code, signal, error_file, stopped_peer, ignores_term, restart_once, grandchild,
  launcher_term, launcher_kill, launcher_kill_early, helper_ok, helper_launcher_kill, count_
};

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::none: return "none";
    case Fault::exit_code: return "a worker exits with a code";
    case Fault::signal: return "a worker dies of a signal";
    case Fault::error_file: return "a worker writes its error file and exits 1";
    case Fault::stopped_peer: return "a worker stops itself (SIGSTOP), its peer fails";
    case Fault::ignores_term: return "a worker ignores SIGTERM, its peer fails";
    case Fault::restart_once: return "a worker fails on attempt 0 only (--max_restarts=1)";
    case Fault::grandchild: return "a worker leaves a background child and exits 0";
    case Fault::launcher_term: return "the launcher gets SIGTERM while workers run";
    case Fault::launcher_kill: return "the launcher gets SIGKILL while workers run";
    case Fault::launcher_kill_early: return "the launcher gets SIGKILL 0-20 ms after its start";
    case Fault::helper_ok: return "helper: process group and /dev/shm set-up, no fault";
    case Fault::helper_launcher_kill: return "helper: the launcher gets SIGKILL as rank 0 creates its /dev/shm segment";
    default: return "?";
  }
}

struct Plan {
  Fault fault = Fault::none;
  std::vector<std::string> argv;  // after ddp-launch's own options
  int max_restarts = 0;
  int expect_code = 0;
  std::optional<int> expect_rank;
  std::string expect_text;
  double kill_after_ms = -1;  // launcher_kill_early / helper_launcher_kill
  bool wait_ready = false;    // signal the launcher once both workers are running
  bool kill_on_segment = false;  // signal the launcher when a segment appears in the run's /dev/shm
  int launcher_signal = 0;
};

std::string helper() { return bin_path("ddp-worker-test-helper"); }

Plan draw(std::mt19937_64& rng, long index, const Sandbox& sb) {
  Plan p;
  const bool helper_turn = index % 20 == 19 && fs::exists(helper());
  std::uniform_int_distribution<int> shell_kind(0, static_cast<int>(Fault::launcher_kill_early));
  std::uniform_int_distribution<int> rank_d(0, 1), code_d(1, 125), helper_kind(0, 1);
  if (helper_turn) {
    p.fault = helper_kind(rng) ? Fault::helper_launcher_kill : Fault::helper_ok;
  } else {
    p.fault = static_cast<Fault>(shell_kind(rng));
  }
  const int r = rank_d(rng), code = code_d(rng);
  const std::string R = std::to_string(r);
  const std::string ready = "touch \"" + sb.work() + "/ready.$RANK\"; ";
  // The worker that is not the faulty one: done at once, or still working
  // (killed by the teardown).
  const std::string peer = rank_d(rng) ? "exit 0" : "exec sleep 30";
  auto sh = [&](const std::string& script) { p.argv = {"/bin/sh", "-c", script}; };
  switch (p.fault) {
    case Fault::none: sh("exit 0"); break;
    case Fault::exit_code:
      sh("[ \"$RANK\" = " + R + " ] && exit " + std::to_string(code) + "; " + peer);
      p.expect_code = code, p.expect_rank = r;
      break;
    case Fault::signal: {
      const int sigs[] = {SIGKILL, SIGSEGV, SIGABRT, SIGTERM, SIGBUS};
      const int sig = sigs[std::uniform_int_distribution<int>(0, 4)(rng)];
      // "$$$$": the launcher substitutes the program's arguments as torchrun
      // does (string.Template: "$$" is an escaped "$"), so the shell gets "$$".
      sh("[ \"$RANK\" = " + R + " ] && kill -" + std::to_string(sig) + " $$$$; " + peer);
      p.expect_code = 128 + sig, p.expect_rank = r;
      break;
    }
    case Fault::error_file:
      sh("if [ \"$RANK\" = " + R + " ]; then printf '{\"message\": {\"message\": \"soak failure %s\", "
         "\"extraInfo\": {\"py_callstack\": \"\", \"timestamp\": \"0\"}}}' " + std::to_string(index) +
         " > \"$TORCHELASTIC_ERROR_FILE\"; exit 1; fi; " + peer);
      p.expect_code = 1, p.expect_rank = r, p.expect_text = "soak failure " + std::to_string(index);
      break;
    case Fault::stopped_peer:
      sh("[ \"$RANK\" = " + R + " ] && kill -STOP $$$$; exit " + std::to_string(code));
      // The stopped one never fails: its peer is the root cause; the
      // teardown's SIGCONT lets the stopped one act on SIGTERM.
      p.expect_code = code, p.expect_rank = 1 - r;
      break;
    case Fault::ignores_term:
      sh("if [ \"$RANK\" = " + R + " ]; then trap '' TERM; exec sleep 30; fi; exit " + std::to_string(code));
      p.expect_code = code, p.expect_rank = 1 - r;
      break;
    case Fault::restart_once:
      sh("[ \"$RANK\" = " + R + " ] && [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && exit " + std::to_string(code) +
         "; exit 0");
      p.max_restarts = 1, p.expect_code = 0, p.expect_text = "(restart 1 of 1)";
      break;
    case Fault::grandchild:
      sh("[ \"$RANK\" = " + R + " ] && sleep 30 & exit 0");
      p.expect_code = 0;
      break;
    case Fault::launcher_term:
    case Fault::launcher_kill:
      sh(ready + "exec sleep 30");
      p.wait_ready = true;
      p.launcher_signal = p.fault == Fault::launcher_term ? SIGTERM : SIGKILL;
      p.expect_code = 128 + p.launcher_signal;
      break;
    case Fault::launcher_kill_early:
      sh("exec sleep 30");
      p.kill_after_ms = std::uniform_real_distribution<double>(0, 20)(rng);
      p.launcher_signal = SIGKILL, p.expect_code = 137;
      break;
    case Fault::helper_ok:
      p.argv = {helper(), "init"};
      break;
    case Fault::helper_launcher_kill:
      p.argv = {helper(), "init"};
      // At the segment's creation (issue 15 defect 6's window) where the
      // run has a /dev/shm of its own to watch; else at a drawn moment.
      p.kill_on_segment = sb.private_shm();
      p.kill_after_ms = p.kill_on_segment ? -1 : std::uniform_real_distribution<double>(0, 3000)(rng);
      p.launcher_signal = SIGKILL, p.expect_code = 137;
      break;
    default: break;
  }
  return p;
}

// Runs one launch; returns what was wrong with it ("" when all held).
// *zombie_only: the one thing wrong was a zombie left (issue 15 defect 11).
// Adds one to tally[k] for each kind k of fault found (hang, exit code,
// root cause, output, live process, zombie, file, segment).
std::string launch_once(const Plan& plan, Sandbox& sb, bool* zombie_only, std::map<std::string, int>& tally) {
  std::vector<std::string> argv = {bin_path("ddp-launch"), "--standalone", "--nproc_per_node=2", "--use_env",
                                   "--shutdown_timeout=1", "--max_restarts=" + std::to_string(plan.max_restarts)};
  argv.insert(argv.end(), plan.argv.begin(), plan.argv.end());
  std::optional<CreateWatch> segments;
  if (plan.kill_on_segment) segments.emplace(sb.shm());
  Proc p(sb.wrap(argv), sb.env({{"OMP_NUM_THREADS", "1"}, {"DDP_TIMEOUT_S", "30"}}));
  std::ostringstream why;
  if (segments) {
    if (!segments->wait("ddp-shm-", kLaunchTimeout)) why << "no /dev/shm segment was made; ";
    p.signal(plan.launcher_signal);
  } else if (plan.wait_ready) {
    const bool ready = wait_until([&] {
      return (fs::exists(sb.work("ready.0")) && fs::exists(sb.work("ready.1"))) || !p.running();
    }, kLaunchTimeout);
    if (!ready || !p.running()) why << "workers never both started; ";
    p.signal(plan.launcher_signal);
  } else if (plan.kill_after_ms >= 0) {
    // The fault's moment, drawn from the seed (not a synchronisation).
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(plan.kill_after_ms));
    p.signal(plan.launcher_signal);
  }
  const auto code = p.wait(kLaunchTimeout);
  const std::string out = p.output();
  if (!code) {
    why << "HANG (no exit after " << kLaunchTimeout << " s); ";
  } else {
    // A launcher killed before it could finish an early-kill launch that had
    // already ended is not a fault: then the job's own code stands.
    const bool ended_first = plan.kill_after_ms >= 0 && *code != plan.expect_code && *code == 0 &&
                             out.find("run summary") != std::string::npos;
    if (*code != plan.expect_code && !ended_first)
      why << "exit code " << *code << ", expected " << plan.expect_code << "; ";
    if (plan.expect_rank && root_cause_rank(out) != plan.expect_rank)
      why << "root cause is not rank " << *plan.expect_rank << "; ";
    if (!plan.expect_text.empty() && out.find(plan.expect_text) == std::string::npos)
      why << "output lacks '" << plan.expect_text << "'; ";
  }
  const bool launcher_killed = plan.launcher_signal == SIGKILL;
  const Leftovers l = sb.leftovers(/*allow_zombies=*/launcher_killed, /*settle_s=*/launcher_killed ? 20 : 0, out);
  *zombie_only = why.str().empty() && l.only_zombies();
  const std::string w = why.str();
  if (w.find("HANG") != std::string::npos) tally["hang"]++;
  if (w.find("exit code ") != std::string::npos) tally["wrong exit code"]++;
  if (w.find("root cause is not") != std::string::npos) tally["wrong root-cause rank"]++;
  if (w.find("output lacks") != std::string::npos) tally["output lacks a line"]++;
  if (l.zombies > 0) tally["zombie left"]++;
  if (static_cast<int>(l.processes.size()) > l.zombies) tally["live process left"]++;
  if (!l.tmp_files.empty()) tally["file left in TMPDIR"]++;
  if (!l.segments.empty()) tally["/dev/shm segment left"]++;
  if (!l.empty()) why << "left behind:\n" << l.describe();
  if (!why.str().empty()) why << "\n--- output ---\n" << out.substr(0, 4000);
  return why.str();
}

}  // namespace

TEST_CASE("soak: consecutive short launches with seeded random faults: no hang, nothing left, every exit code the "
          "root cause's",
          "[reliability][soak]") {
  const long launches = env_count("DDP_SOAK_LAUNCHES", long_variant() ? 1000 : 200);
  auto rng = case_rng("soak");
  std::map<std::string, int> counts;
  std::vector<std::string> failures;
  std::map<std::string, int> failed_kinds;
  long zombie_only_failures = 0;
  std::map<std::string, int> zombie_kinds;  // failed launches whose only fault was a zombie
  std::map<std::string, int> tally;         // launches with each kind of fault
  Stopwatch clock;
  for (long i = 0; i < launches; ++i) {
    Sandbox sb("soak");
    const Plan plan = draw(rng, i, sb);
    counts[fault_name(plan.fault)]++;
    bool zombie_only = false;
    const std::string why = launch_once(plan, sb, &zombie_only, tally);
    if (!why.empty()) {
      failed_kinds[fault_name(plan.fault)]++;
      if (zombie_only) ++zombie_only_failures, zombie_kinds[fault_name(plan.fault)]++;
      else if (failures.size() < 10)
        failures.push_back("launch " + std::to_string(i) + " (" + fault_name(plan.fault) + "): " + why);
    }
  }
  const double seconds = clock.seconds();
  std::ostringstream summary;
  long failed = 0;
  for (const auto& [kind, n] : counts) {
    const int bad = failed_kinds.count(kind) ? failed_kinds[kind] : 0;
    failed += bad;
    const int zombie = zombie_kinds.count(kind) ? zombie_kinds[kind] : 0;
    summary << "  " << kind << ": " << n << " launches, " << bad << " failed (" << zombie << " only by a zombie)\n";
    print_result("soak: " + kind,
                 std::to_string(n - bad) + "/" + std::to_string(n) + " held" +
                     (bad ? ", " + std::to_string(zombie) + " of the " + std::to_string(bad) + " failed only by a zombie" : ""),
                 0);
  }
  print_result("soak: all " + std::to_string(launches) + " launches",
               std::to_string(launches - failed) + "/" + std::to_string(launches) + " held, " +
                   std::to_string(zombie_only_failures) + " failed only by a zombie",
               seconds);
  std::string kinds;
  for (const auto& [k, n] : tally) kinds += (kinds.empty() ? "" : ", ") + k + " " + std::to_string(n);
  print_result("soak: launches by fault found", kinds.empty() ? "none" : kinds, 0);
  INFO("launches by fault found: " << (kinds.empty() ? "none" : kinds));
  INFO(launches << " launches in " << seconds << " s (seed " << base_seed() << "):\n" << summary.str()
                << zombie_only_failures << " of the failed launches left only a zombie behind");
  std::string first;
  for (const auto& f : failures) first += f + "\n";
  INFO("first failures (other than a zombie alone):\n" << first);
  CHECK(failed == 0);
}
