// The attempt's features in process (supervise/feature.h): a FakeAttempt is
// their AttemptControl, with heartbeat pages this test writes as a worker
// would, made-up exits and a fake rendezvous helper. Each case drives one
// feature through its hooks and its loop source, as Attempt would, and
// checks what it tells the attempt (fail, stop, its log) and the exits.
#include "ddp/common/json_writer.h"
#include "ddp/launcher/config/options.h"
#include "ddp/launcher/elastic/rdzv_link.h"
#include "ddp/launcher/process/heartbeat_pages.h"
#include "ddp/launcher/process/run_dir.h"
#include "ddp/launcher/report/summary.h"
#include "ddp/launcher/base/time_text.h"
#include "ddp/launcher/supervise/feature.h"
#include "ddp/launcher/supervise/features/features.h"
#include "ddp/launcher/supervise/run_services.h"

#include "scratch_dir.h"

#include <catch2/catch.hpp>

#include <cctype>
#include <chrono>
#include <csignal>
#include <ctime>
#include <deque>
#include <fcntl.h>
#include <map>
#include <memory>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace ddp::launcher;
using namespace std::chrono_literals;

namespace {

// What Attempt is to its features, without processes: the test says which
// workers run (pids, groups), and sees what the features ask.
class FakeAttempt final : public AttemptControl {
 public:
  explicit FakeAttempt(int nproc, int world_size) {
    plan.opts = parse_launch_options({"x"}, {});
    plan.nproc = nproc;
    result_.world_size = world_size;
    result_.group_world_size = world_size / nproc;
  }

  const AttemptInfo& info() const override { return info_; }
  std::ostream& log() override { return log_; }
  bool stopping() const override { return !failures.empty() || !stops.empty(); }
  bool killed() const override { return killed_; }
  bool fail(const WorkerExit& cause) override {
    failures.push_back(cause);
    return failures.size() == 1;
  }
  void stop(const std::string& reason) override { stops.push_back(reason); }
  void dump_stacks(const std::string& why) override { dumps.push_back(why); }
  void worker_output(int /*local_rank*/) override {}
  int local_rank_of_group(pid_t pgid) const override {
    for (const auto& [lr, pid] : pids)
      if (pid == pgid) return lr;
    return -1;
  }
  pid_t worker_pid(int local_rank) const override {
    const auto it = pids.find(local_rank);
    return it == pids.end() ? 0 : it->second;
  }
  const AttemptResult& result() const override { return result_; }
  const HeartbeatPages& pages() const override { return pages_; }
  bool respawn(int local_rank, const EnvMap& extra_env) override {
    respawns.push_back({local_rank, extra_env});
    return respawn_works;
  }
  void start_standby() override { ++standbys; }
  void tell_recovery_generation(int local_rank, uint64_t generation) override {
    pages_.tell_recovery_generation(local_rank, generation);
  }
  void record_recovery(const Recovery& r) override {
    for (Recovery& old : result_.recoveries)
      if (old.generation == r.generation && old.local_rank == r.local_rank) {
        old = r;
        return;
      }
    result_.recoveries.push_back(r);
  }

  // The page of this local rank, attached as its worker attaches it (the
  // page then holds this process's pid).
  std::unique_ptr<ddp::Heartbeat> worker_page(int local_rank) {
    const int fd = pages_.create(local_rank);
    REQUIRE(fd >= 0);
    auto page = ddp::Heartbeat::attach(ddp::Heartbeat::fd_path(::dup(fd)));
    pages_.started(local_rank);
    return page;
  }

  // Starts the worker of this local rank as `pid` for `f`, as Attempt does.
  void start(Feature& f, int local_rank, pid_t pid) {
    SpawnSpec spawn;
    GroupSpec group;
    std::vector<int> close_after;
    const std::string none;
    const RankLogPaths paths;
    WorkerSlot slot{local_rank, info_.base_rank + local_rank, spawn, group, none, paths, close_after, none, "", ""};
    f.before_spawn(slot);
    timer_file = group.timer_file;
    pids[local_rank] = pid;
    f.spawned(local_rank, pid);
  }

  LaunchPlan plan;
  RunDirectory dir;
  Placement placement;
  RunServices services;
  std::map<int, pid_t> pids;
  std::vector<WorkerExit> failures;
  std::vector<std::pair<int, EnvMap>> respawns;
  bool respawn_works = true;
  int standbys = 0;  // start_standby() calls
  std::vector<std::string> stops, dumps;
  std::string timer_file;
  bool killed_ = false;
  std::ostringstream log_;

 private:
  HeartbeatPages pages_;
  AttemptResult result_;
  AttemptInfo info_{plan, dir, placement, services, 0, 0};
};

// The rendezvous helper, faked: what the attempt told it, and the lines it
// is to say next.
class FakeLink final : public RdzvLink {
 public:
  void send(ddp::rdzv::lines::Command command, const std::string& arg) override {
    sent.push_back(ddp::rdzv::lines::format_command(command, arg));
  }
  int fd() const override { return -1; }
  std::vector<RdzvEvent> read() override {
    std::vector<RdzvEvent> out(said.begin(), said.end());
    said.clear();
    return out;
  }
  bool gone() const override { return false; }
  int ms_to_ping() const override { return 1000; }
  void ping_if_due() override {}

  std::vector<std::string> sent;
  std::deque<RdzvEvent> said;
};

// A worker's exit as the attempt reaps it: by `sig` (0: exit code 0).
WorkerExit exit_of(int rank, int local_rank, pid_t pid, int sig = 0, bool after_teardown = false) {
  WorkerExit w;
  w.rank = rank;
  w.local_rank = local_rank;
  w.pid = pid;
  w.signaled = sig != 0;
  w.code = sig;
  w.after_teardown = after_teardown;
  return w;
}

// Serves a feature's loop source until `done`, at most `limit`: its
// deadline, then due(), as the attempt's loop would.
template <typename Done>
void serve(EventLoop::Source& s, Done done, std::chrono::milliseconds limit = 5000ms) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) {
    const auto at = s.deadline();
    if (!at) break;
    std::this_thread::sleep_until(std::min(*at, until));
    s.due();
  }
}

// A child in its own process group that waits for a signal (the default
// action: not the test framework's handler); killed and reaped at the end
// of the case whatever happened.
struct WaitingChild {
  pid_t pid = 0;
  bool reaped = false;
  WaitingChild() {
    // Blocked across the fork: a SIGTERM sent at once waits for the default action.
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &term, nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::signal(SIGTERM, SIG_DFL);
      ::setpgid(0, 0);
      ::sigprocmask(SIG_UNBLOCK, &term, nullptr);
      for (;;) ::pause();
    }
    ::sigprocmask(SIG_UNBLOCK, &term, nullptr);
    ::setpgid(pid, pid);
  }
  ~WaitingChild() {
    if (pid <= 0 || reaped) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  int wait() {
    int status = 0;
    if (::waitpid(pid, &status, 0) == pid) reaped = true;
    return status;
  }
};

}  // namespace

TEST_CASE("features: the stall names the rank behind the others, dumps stacks and fails the attempt once") {
  // Pids above any pid_max: no process in /proc (its state would be in the verdict).
  const pid_t kPid0 = 4194400, kPid1 = 4194401;
  FakeAttempt a(2, 2);
  a.plan.opts.stall_timeout_s = 0.2;  // below the option's floor: the detector takes it
  std::unique_ptr<Feature> f = make_stalls(a);
  REQUIRE(f->source());
  CHECK(f->after_reaping());  // a rank that just exited is reaped before a look blames it
  auto p0 = a.worker_page(0);
  auto p1 = a.worker_page(1);
  a.start(*f, 0, kPid0);
  a.start(*f, 1, kPid1);
  // Rank 0 waits in collective #2; rank 1 finished #1 and never started #2.
  p0->collective_started(1, ddp::CollectiveKind::Allreduce, 64);
  p0->collective_finished(1);
  p0->collective_started(2, ddp::CollectiveKind::Allreduce, 64);
  p1->collective_started(1, ddp::CollectiveKind::Allreduce, 64);
  p1->collective_finished(1);
  serve(*f->source(), [&] { return !a.failures.empty(); });

  REQUIRE(a.failures.size() == 1);
  const WorkerExit& told = a.failures[0];
  CHECK(told.rank == 1);
  CHECK(told.pid == kPid1);
  CHECK_THAT(told.stalled, Catch::StartsWith("rank 1 (local_rank 1, pid " + std::to_string(kPid1) + ") stalled: no progress for "));
  CHECK(told.reason_text() == "it stalled (no progress for 0 s)");
  CHECK(told.spawn_error.empty());  // the stall is said by reason_text, not through another field
  CHECK(a.dumps == std::vector<std::string>{"stalled"});
  // Issue 51 item 12: under Lightning the teardown took the whole
  // --shutdown_timeout after this line, which did not say it might.
  CHECK_THAT(a.log_.str(), Catch::Contains("; stopping the group: SIGTERM now, SIGKILL to any rank still there after "
                                           "30 s (--shutdown_timeout)\n"));
  CHECK(f->stack_note() == "rank 1 last finished collective #1; rank 0 waits in #2 (allreduce, 64 B)");
  CHECK_FALSE(f->source()->deadline());  // decided: it never looks again

  // The straggler's exit, once reaped, is the root cause, code 124.
  AttemptResult r = a.result();
  r.exits.push_back(exit_of(1, 1, kPid1, SIGTERM, true));
  const std::optional<WorkerExit> cause = f->root_cause(r);
  REQUIRE(cause);
  CHECK(cause->pid == kPid1);
  CHECK(cause->signaled);
  CHECK(cause->shell_code() == kStallExitCode);
}

TEST_CASE("features: a file-timer scope that expires signals its process and is the attempt's failure") {
  ddp::test::ScratchDir scratch;
  FakeAttempt a(1, 1);
  a.services.timers.emplace(scratch.dir + "/timer");
  std::unique_ptr<Feature> f = make_file_timer(a);
  REQUIRE(f->source());
  WaitingChild worker;
  const pid_t child = worker.pid;
  REQUIRE(child > 0);
  a.start(*f, 0, child);
  CHECK(a.timer_file == scratch.dir + "/timer");  // TORCHELASTIC_TIMER_FILE of every worker

  // As FileTimerClient: one line, a scope that expired a second ago.
  const int fd = ::open(a.timer_file.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const std::string line = R"({"version": 1, "pid": )" + std::to_string(child) +
                           R"(, "scope_id": "load_batch", "expiration_time": )" +
                           std::to_string(static_cast<long long>(std::time(nullptr)) - 1) + R"(, "signal": 15})" + "\n";
  REQUIRE(::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size()));
  ::close(fd);
  pollfd polled{a.services.timers->fd(), POLLIN, POLLIN};
  f->source()->ready(&polled, 1);

  const int status = worker.wait();
  REQUIRE(worker.reaped);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  REQUIRE(a.failures.size() == 1);
  const WorkerExit& told = a.failures[0];
  CHECK(told.rank == 0);
  CHECK(told.pid == child);
  REQUIRE(told.expired_scope);
  CHECK(told.expired_scope->scope_id == "load_batch");
  CHECK(told.expired_scope->signal == SIGTERM);
  CHECK_THAT(told.reason_text(), Catch::StartsWith("timer scope 'load_batch' expired"));
  CHECK_THAT(a.log_.str(), Catch::Contains("rank 0 (local_rank 0, pid " + std::to_string(child) +
                                           "): timer scope 'load_batch' expired"));

  // Its exit, reaped after the teardown began, carries the scope.
  AttemptResult r = a.result();
  r.exits.push_back(exit_of(0, 0, child, SIGTERM, true));
  f->finish(r);
  REQUIRE(r.exits[0].expired_scope);
  CHECK_FALSE(r.exits[0].after_teardown);
  CHECK(r.exits[0].failed());
}

TEST_CASE("features: step statistics name the rank the others wait for, publish the window and fill the summary") {
  FakeAttempt a(2, 2);
  a.plan.opts.straggler_window_s = 0.3;
  a.plan.opts.event_log_handler = EventLogHandler::Console;
  FakeLink link;
  a.services.agent = &link;
  a.services.job_windows.emplace(link);
  std::unique_ptr<Feature> f = make_step_stats(a);
  REQUIRE(f->source());
  auto fast = a.worker_page(0);
  auto slow = a.worker_page(1);
  a.start(*f, 0, 2000);
  a.start(*f, 1, 2001);
  // Steps of 10 ms: rank 0 waits 9 of them in collectives, rank 1 none.
  const auto until = std::chrono::steady_clock::now() + 10s;
  for (uint64_t step = 1; a.log_.str().find("is a straggler") == std::string::npos &&
                          std::chrono::steady_clock::now() < until;
       ++step) {
    fast->set_step(step);
    slow->set_step(step);
    std::this_thread::sleep_for(10ms);
    fast->add_wait_ns(9'000'000);
    f->source()->due();
  }
  const std::string log = a.log_.str();
  CHECK_THAT(log, Catch::Contains("ddp-launch: rank 1 (host "));
  CHECK_THAT(log, Catch::Contains(", local_rank 1) is a straggler: "));
  CHECK_THAT(log, Catch::Contains("\"state\": \"STRAGGLER\""));  // --event_log_handler console
  // c10d: this node's window went to the other nodes through the helper.
  REQUIRE_FALSE(link.sent.empty());
  CHECK_THAT(link.sent.front(), Catch::StartsWith("steps "));
  CHECK(parse_job_windows(link.sent.front().substr(6), 2).size() == 2);

  AttemptResult r = a.result();
  for (int lr : {0, 1}) {
    r.exits.push_back(exit_of(lr, lr, 2000 + lr));
    f->exited(r.exits.back());
  }
  f->drained();
  f->finish(r);
  for (const WorkerExit& w : r.exits) {
    INFO("rank " << w.rank);
    REQUIRE(w.steps);
    CHECK(w.steps->steps > 5);
  }
  CHECK(r.exits[1].steps->relative_score < 0.8);
  CHECK(r.exits[0].steps->relative_score == 1);
}

TEST_CASE("features: collectives written faster than read are counted per rank in the trace, not only dropped") {
  // A rank of tiny collectives in a loop: 200 between two reads, where its
  // page keeps the last kCollectiveRing (76). The trace said
  // dropped_slices: 0 and nothing else.
  FakeAttempt a(2, 2);
  a.services.trace.emplace("/unused", "h", 0);
  std::unique_ptr<Feature> f = make_step_stats(a);
  auto busy = a.worker_page(0);
  auto calm = a.worker_page(1);
  a.start(*f, 0, 2000);
  a.start(*f, 1, 2001);
  for (uint64_t seq = 1; seq <= 200; ++seq) {
    busy->collective_started(seq, ddp::CollectiveKind::Allreduce, 64);
    busy->collective_finished(seq);
  }
  calm->collective_started(1, ddp::CollectiveKind::Allreduce, 64);
  calm->collective_finished(1);
  f->source()->due();
  const std::string json = a.services.trace->json();
  CHECK(a.services.trace->slices() == 77);  // the ring's 76 and rank 1's one
  CHECK_THAT(json, Catch::Contains("\"lost_marks\":[{\"rank\":0,\"steps\":0,\"collectives\":124}]"));
}

TEST_CASE("features: the rendezvous tells the other nodes of the first failure and stops on their reason") {
  FakeAttempt a(2, 4);
  FakeLink link;
  a.services.agent = &link;
  a.services.job_windows.emplace(link);
  a.services.job_windows->new_round(4);
  a.placement.node = "node n0 (pid 7, host h0)";
  std::unique_ptr<Feature> f = make_rendezvous(a);
  REQUIRE(f->source());

  WorkerExit stalled = exit_of(1, 1, 77);
  stalled.stalled = "rank 1 (local_rank 1, pid 77) stalled: no progress for 5.0 s";
  stalled.stalled_idle_s = 5.2;
  f->failed(stalled);
  WorkerExit later = exit_of(0, 0, 78);
  later.code = 3;
  f->failed(later);  // the first failure only
  CHECK(link.sent ==
        std::vector<std::string>{"fail rank 1 (local_rank 1, pid 77) on node n0 (pid 7, host h0) failed: it stalled "
                                 "(no progress for 5 s)"});

  // Every node's window, for the step statistics' next one.
  WindowRank other;
  other.rank = 2;
  other.host = "h1";
  other.work_ms = 12;
  other.steps = 9;
  RdzvEvent steps;
  steps.kind = RdzvEvent::JobSteps;
  steps.text = format_node_window("h1", {other});
  // Another node left: this node's workers stop, the restart not counted.
  RdzvEvent restart;
  restart.kind = RdzvEvent::Restart;
  restart.counted = false;
  restart.text = "node n1 (host h1) left";
  link.said = {steps, restart};
  f->source()->ready(nullptr, 0);
  CHECK(a.stops == std::vector<std::string>{"node n1 (host h1) left"});
  REQUIRE(a.services.job_windows->others().size() == 1);
  CHECK(a.services.job_windows->others()[0].rank == 2);

  AttemptResult r;
  f->finish(r);
  CHECK(r.rdzv_told_failure);
  CHECK(r.rdzv_stop == "node n1 (host h1) left");
  CHECK_FALSE(r.rdzv_counted);
  CHECK_FALSE(r.rdzv_abort);
}

// Issue 51 item 9: this node's own failure came first, then another node's
// launcher ended the job; the report said only "worker group FAILED" (1 of
// 4 tries), never why there was no restart with max_restarts 3.
TEST_CASE("features: a local failure in a job another node ended: the report says why there is no restart") {
  FakeAttempt a(1, 2);
  FakeLink link;
  a.services.agent = &link;
  a.placement.node = "node n0 (pid 7, host h0)";
  auto f = make_rendezvous(a);
  WorkerExit w = exit_of(0, 0, 77);
  w.code = 1;
  f->failed(w);
  RdzvEvent abort;
  abort.kind = RdzvEvent::Abort;
  abort.text = "the launcher of node n1 (pid 9, host h1) got SIGTERM";
  link.said = {abort};
  f->source()->ready(nullptr, 0);
  AttemptResult r;
  r.root_cause = w;
  r.exits = {w};
  f->finish(r);
  REQUIRE(r.rdzv_abort);
  const std::string report = format_failure_report({r}, "h0", 3);
  CHECK_THAT(report, Catch::Contains("ddp-launch: worker group FAILED (attempt 0, max_restarts 3)\n"
                                     "ddp-launch: not restarted: the job was ended: the launcher of node n1 (pid 9, "
                                     "host h1) got SIGTERM\n"));
  r.rdzv_abort = false;  // a restart that was refused for another reason says nothing of it
  CHECK_THAT(format_failure_report({r}, "h0", 3), !Catch::Contains("not restarted"));
}

// Issue 51 item 12: a rank that Gloo aborted in its own exit during the
// teardown was listed "after the launcher stopped the group", as if the
// launcher had caused it.
TEST_CASE("report: a rank that died of its own signal during the teardown is said to end by itself, and when") {
  WorkerExit cause = exit_of(0, 0, 100);
  cause.code = 1;
  cause.time = std::chrono::system_clock::time_point(std::chrono::seconds(1000));
  WorkerExit aborted = exit_of(1, 1, 101, SIGABRT, true);
  aborted.time = cause.time + std::chrono::milliseconds(812);
  WorkerExit stopped = exit_of(2, 2, 102, SIGTERM, true);
  stopped.time = cause.time + std::chrono::milliseconds(5);
  AttemptResult r;
  r.root_cause = cause;
  r.exits = {cause, stopped, aborted};
  const std::string report = format_failure_report({r}, "h", 0);
  CHECK_THAT(report, Catch::Contains("  rank 1 (local_rank 1, pid 101): signal 6 (SIGABRT), by itself (the launcher "
                                     "sends SIGTERM, then SIGKILL) while the group was being stopped, 812 ms after "
                                     "rank 0 failed\n"));
  CHECK_THAT(report, Catch::Contains("  rank 2 (local_rank 2, pid 102): signal 15 (SIGTERM), after the launcher "
                                     "stopped the group\n"));
}

TEST_CASE("features: the rendezvous tells an expired scope, a failed start or an exit code as it is") {
  FakeAttempt a(1, 2);
  FakeLink link;
  a.services.agent = &link;
  a.placement.node = "node n1 (pid 8, host h1)";
  WorkerExit w = exit_of(3, 1, 88, SIGSEGV);
  make_rendezvous(a)->failed(w);
  w.spawn_error = "cannot execute ./train: No such file or directory";
  w.pid = 0;
  make_rendezvous(a)->failed(w);
  REQUIRE(link.sent.size() == 2);
  CHECK(link.sent[0] == "fail rank 3 (local_rank 1, pid 88) on node n1 (pid 8, host h1) failed: signal 11 (SIGSEGV)");
  CHECK(link.sent[1] ==
        "fail rank 3 (local_rank 1) on node n1 (pid 8, host h1) failed: cannot execute ./train: No such file or directory");
}

TEST_CASE("features: the exit verdict names a signal after the program finished, and only then") {
  FakeAttempt a(2, 2);
  std::unique_ptr<Feature> f = make_exit_verdict(a);
  auto finished = a.worker_page(0);
  auto running = a.worker_page(1);
  a.start(*f, 0, ::getpid());  // the page holds the pid of the process that attached it: this one
  a.start(*f, 1, ::getpid());
  finished->mark_exiting();

  const WorkerExit w = exit_of(0, 0, ::getpid(), SIGABRT);
  WorkerExit died = w;
  f->exited(died);
  const Verdict* v = died.verdict("exit_verdict");
  REQUIRE(v);
  CHECK_THAT(v->text, Catch::StartsWith("its program had finished ") && Catch::Contains(" ms before: it died in its exit"));
  CHECK(v->label == "in exit");
  CHECK(v->status == "in exit");
  CHECK(v->json_key.empty());  // not in --summary_json (as before verdicts were generic)

  WorkerExit still_running = w;  // no exiting mark: a crash of the program itself
  still_running.local_rank = 1;
  f->exited(still_running);
  CHECK(still_running.verdicts.empty());

  WorkerExit exit_code = w;  // a code after the mark is the program's own choice
  exit_code.signaled = false;
  exit_code.code = 3;
  f->exited(exit_code);
  CHECK(exit_code.verdicts.empty());

  WorkerExit torn_down = w;  // the launcher stopped the group
  torn_down.after_teardown = true;
  f->exited(torn_down);
  CHECK(torn_down.verdicts.empty());

  WorkerExit other_pid = w;  // the page is an earlier worker's
  other_pid.pid = ::getpid() + 1;
  f->exited(other_pid);
  CHECK(other_pid.verdicts.empty());

  a.killed_ = true;  // the launcher's own SIGKILL
  WorkerExit killed = w;
  f->exited(killed);
  CHECK(killed.verdicts.empty());
}

// What the exit verdict shows, through the report's and the summary's
// generic rendering: byte for byte as before verdicts were generic (the
// milliseconds, which depend on this machine's clock, written as N).
TEST_CASE("features: the exit verdict reaches the report, the restart line and the summary, as it always read") {
  FakeAttempt a(1, 2);
  std::unique_ptr<Feature> f = make_exit_verdict(a);
  auto page = a.worker_page(0);
  a.start(*f, 0, ::getpid());
  page->mark_exiting();
  const auto at = std::chrono::system_clock::time_point{} + std::chrono::seconds(1700000000);

  // Attempt 0: rank 0 died in its exit and is the root cause.
  WorkerExit died = exit_of(0, 0, ::getpid(), SIGABRT);
  died.time = at;
  f->exited(died);
  AttemptResult first;
  first.attempt = 0;
  first.root_cause = died;
  first.exits = {died};
  // Attempt 1: rank 1 failed with a code; rank 0 died in its exit again.
  WorkerExit failed = exit_of(1, 1, ::getpid() + 1);
  failed.code = 1;
  failed.time = at;
  WorkerExit again = exit_of(0, 0, ::getpid(), SIGSEGV);
  f->exited(again);
  AttemptResult second;
  second.attempt = 1;
  second.root_cause = failed;
  second.exits = {failed, again};

  auto ms_as_n = [](std::string s) {
    const std::string before = "its program had finished ";
    for (size_t at = s.find(before); at != std::string::npos; at = s.find(before, at + 1)) {
      const size_t from = at + before.size();
      size_t to = from;
      while (to < s.size() && std::isdigit(static_cast<unsigned char>(s[to]))) ++to;
      s.replace(from, to - from, "N");
    }
    return s;
  };
  const std::string teardown =
      " ms before: it died in its exit, in a library's teardown (a Python rank on torch 2.x with Gloo: call "
      "torch.distributed.destroy_process_group() before the script ends)";
  const std::string pid = std::to_string(::getpid()), pid1 = std::to_string(::getpid() + 1);
  CHECK(format_restart_line(first, 3) ==
        "ddp-launch: attempt 0 failed: rank 0 signal 6 (SIGABRT), in its exit after its program had finished; "
        "restarting the group (restart 1 of 3)");
  const std::string when = format_time(at);
  CHECK(ms_as_n(format_failure_report({first, second}, "h", 1)) ==
        std::string(72, '=') + "\n" +
            "ddp-launch: worker group FAILED (attempt 1, max_restarts 1)\n"
            "Earlier attempt 0 root cause:\n"
            "  time       : " + when + "\n"
            "  host       : h\n"
            "  rank       : 0 (local_rank: 0)\n"
            "  pid        : " + pid + "\n"
            "  exitcode   : 134 (signal 6 (SIGABRT))\n"
            "  error_file : <none>\n"
            "  message    : Signal 6 (SIGABRT) received by PID " + pid + "\n"
            "  in exit    : its program had finished N" + teardown + "\n"
            "Root cause (earliest failure):\n"
            "  time       : " + when + "\n"
            "  host       : h\n"
            "  rank       : 1 (local_rank: 1)\n"
            "  pid        : " + pid1 + "\n"
            "  exitcode   : 1 (exit code 1)\n"
            "  error_file : <none>\n"
            "  message    : (no error file written; see the worker's own output above)\n"
            "Other workers (attempt 1):\n"
            "  rank 0 (local_rank 0, pid " + pid + "): signal 11 (SIGSEGV); its program had finished N" + teardown + "\n" +
            std::string(72, '=') + "\n");
  RunTotals t;
  t.exit_code = 1;
  t.wall_s = 2;
  t.host = "h";
  CHECK(format_run_summary({first, second}, t) ==
        "ddp-launch: run summary (attempt 1, exit code 1, 2.00 s)\n"
        "    rank local_rank       pid status             wall_s     cpu_s   max_rss\n"
        "       0          0 " + std::string(9 - pid.size(), ' ') + pid + " SIGSEGV in exit      0.00      0.00         -\n"
        "       1          1 " + std::string(9 - pid1.size(), ' ') + pid1 + " exit 1               0.00      0.00         -\n");
  CHECK(format_summary_json({second}, t) ==
        "{\"exit_code\": 1, \"wall_s\": 2.000, \"host\": \"h\", \"log_dir\": null, \"attempts\": [\n"
        "  {\"attempt\": 1, \"exit_code\": 1, \"workers\": [\n"
        "    {\"rank\": 0, \"local_rank\": 0, \"pid\": " + pid + ", \"started\": true, \"exit_code\": 139, \"signal\": "
        "\"SIGSEGV\", \"wall_s\": 0.000, \"cpu_s\": 0.000, \"max_rss_kb\": 0, \"error_file\": null, \"stdout_log\": null, "
        "\"stderr_log\": null, \"steps\": null},\n"
        "    {\"rank\": 1, \"local_rank\": 1, \"pid\": " + pid1 + ", \"started\": true, \"exit_code\": 1, \"signal\": null, "
        "\"wall_s\": 0.000, \"cpu_s\": 0.000, \"max_rss_kb\": 0, \"error_file\": null, \"stdout_log\": null, "
        "\"stderr_log\": null, \"steps\": null}]}]}\n");
}

// A feature the report has never heard of: it says a verdict in exited(),
// and the report, the restart line, the summary table and --summary_json
// show it with no code of their own (report/verdict.h).
class MadeUpVerdict final : public Feature {
 public:
  void exited(WorkerExit& w) override {
    if (w.code != 7) return;
    Verdict v;
    v.feature = "made_up";
    v.label = "made up";
    v.text = "exit code 7 means the disk was full";
    v.restart_note = "the disk was full";
    v.status = "disk full";
    v.json_key = "disk_full_gb";
    v.json_value = "12.5";
    w.verdicts.push_back(v);
    v.label = v.text = v.restart_note = v.status = "";  // a second verdict with only a key
    v.json_key = "disk";
    v.json_value = ddp::json::quoted("/dev/\"sda\"");
    w.verdicts.push_back(v);
  }
};

TEST_CASE("features: a made-up feature's verdict reaches the report, the restart line and the summary with no report code") {
  MadeUpVerdict f;
  WorkerExit full = exit_of(0, 0, 4000);
  full.code = 7;
  f.exited(full);
  WorkerExit fine = exit_of(1, 1, 4001);
  f.exited(fine);
  REQUIRE(full.verdict("made_up"));
  CHECK_FALSE(fine.verdict("made_up"));
  AttemptResult a;
  a.root_cause = full;
  a.exits = {full, fine};
  CHECK(format_restart_line(a, 1) ==
        "ddp-launch: attempt 0 failed: rank 0 exit code 7, the disk was full; restarting the group (restart 1 of 1)");
  const std::string report = format_failure_report({a}, "h", 0);
  CHECK_THAT(report, Catch::Contains("  message    : (no error file written; see the worker's own output above)\n"
                                     "  made up    : exit code 7 means the disk was full\n"));
  AttemptResult b;  // the same worker, not the root cause: its line under "Other workers"
  b.root_cause = fine;
  b.root_cause->code = 1;
  b.exits = {full, *b.root_cause};
  CHECK_THAT(format_failure_report({b}, "h", 0),
             Catch::Contains("  rank 0 (local_rank 0, pid 4000): exit code 7; exit code 7 means the disk was full\n"));
  RunTotals t;
  CHECK_THAT(format_run_summary({a}, t), Catch::Contains(" 4000 exit 7 disk full ") && Catch::Contains(" 4001 exit 0 "));
  const std::string json = format_summary_json({a}, t);
  CHECK_THAT(json, Catch::Contains("\"steps\": null, \"verdicts\": {\"disk_full_gb\": 12.5, \"disk\": \"/dev/\\\"sda\\\"\"}},\n"));
  CHECK(json.find("verdicts") == json.rfind("verdicts"));  // the worker without one has no key
}

TEST_CASE("features: the list follows the plan and the run's services") {
  FakeAttempt a(1, 1);
  a.plan.opts.straggler_threshold = 0;
  const size_t plain = make_features(a).size();
  a.plan.opts.event_log_handler = EventLogHandler::Console;
  CHECK(make_features(a).size() == plain + 1);  // START events
  FakeLink link;
  a.services.agent = &link;
  CHECK(make_features(a).size() == plain + 2);  // the rendezvous
  a.plan.opts.straggler_threshold = 0.8;
  CHECK(make_features(a).size() == plain + 3);  // step statistics
}

// --recovery in_place (features/recovery.cpp). The pages are this test's
// "workers": a rank advertises in-place recovery by writing offset 80.
namespace {
struct RecoveryRig {
  explicit RecoveryRig(int nproc, int max_restarts) : a(nproc, nproc) {
    a.plan.opts.max_restarts = max_restarts;
    f = make_in_place_recovery(a);
    for (int lr = 0; lr < nproc; ++lr) {
      pages.push_back(a.worker_page(lr));
      a.start(*f, lr, 1000 + lr);
    }
  }
  // The worker of this local rank dies of SIGKILL: the attempt's order.
  bool kill(int lr) {
    WorkerExit w = exit_of(lr, lr, a.pids[lr], SIGKILL);
    f->exited(w);
    return f->take_failure(w);
  }
  FakeAttempt a;
  std::unique_ptr<Feature> f;
  std::vector<std::unique_ptr<ddp::Heartbeat>> pages;
};
}  // namespace

TEST_CASE("features: in-place recovery brings back only the lost rank, tells the survivors, says when it is back") {
  RecoveryRig r(2, 3);
  for (auto& p : r.pages) {
    p->set_recovery_capable(true);
    p->set_step(7);
  }
  REQUIRE(r.kill(1));  // taken over: the attempt does not fail
  CHECK(r.a.failures.empty());
  REQUIRE(r.a.respawns.size() == 1);
  CHECK(r.a.respawns[0].first == 1);
  CHECK(r.a.respawns[0].second.at("DDP_RECOVERY_GENERATION") == "1");
  CHECK(r.pages[0]->recovery_generation() == 1);  // the survivor leaves its collective
  CHECK_THAT(r.a.log_.str(), Catch::Contains("ddp-launch: rank 1 (local_rank 1, pid 1001) lost (signal 9 (SIGKILL)) at "
                                              "step 7; bringing back only it, in place (generation 1; the other 1 "
                                              "rank keep their state; recovery 1 of --max_restarts 3)"));
  // The new worker: a fresh page, capable once it holds the state, in the step redone.
  r.a.services.trace.emplace("/unused", "h", 0);
  auto back = r.a.worker_page(1);
  r.a.start(*r.f, 1, ::getpid());  // the page holds this process's pid
  back->set_step(7);
  back->set_recovery_capable(true);
  serve(*dynamic_cast<EventLoop::Source*>(r.f.get()), [&] { return r.a.log_.str().find("is back") != std::string::npos; });
  CHECK_THAT(r.a.log_.str(), Catch::Contains("ddp-launch: rank 1 is back after ") &&
                                  Catch::Contains(" s (in-place recovery, generation 1; 1 step redone)"));
  REQUIRE(r.a.result().recoveries.size() == 1);
  const Recovery& rec = r.a.result().recoveries[0];
  CHECK(rec.completed);
  CHECK(rec.rank == 1);
  CHECK(rec.steps_redone == 1);
  CHECK(rec.seconds > 0);
  CHECK(rec.cause == "signal 9 (SIGKILL)");
  // --trace_file: the instant on the rank's track and the recovery's slice.
  const std::string trace = r.a.services.trace->json();
  CHECK_THAT(trace, Catch::Contains("{\"name\":\"rank 1 back\",\"cat\":\"launcher\",\"ph\":\"i\"") &&
                        Catch::Contains("{\"name\":\"in-place recovery of rank 1 (1 step redone)\",\"cat\":"
                                        "\"launcher\",\"ph\":\"X\""));
}

TEST_CASE("features: in-place recovery asks for a standby process once a rank advertises it, and again once a "
          "recovery is back") {
  FakeAttempt a(2, 2);
  a.plan.opts.max_restarts = 1;
  auto f = make_in_place_recovery(a);
  std::vector<std::unique_ptr<ddp::Heartbeat>> pages;
  for (int lr = 0; lr < 2; ++lr) {
    pages.push_back(a.worker_page(lr));
    a.start(*f, lr, ::getpid());  // the pages hold this process's pid
  }
  auto& source = *dynamic_cast<EventLoop::Source*>(f.get());
  serve(source, [] { return false; }, 300ms);  // a poll or more: nobody advertises (a Python rank's job)
  CHECK(a.standbys == 0);
  pages[1]->set_recovery_capable(true);
  serve(source, [&] { return a.standbys > 0; });
  CHECK(a.standbys == 1);
  pages[0]->set_recovery_capable(true);
  pages[0]->set_step(4);
  WorkerExit w = exit_of(1, 1, ::getpid(), SIGKILL);
  f->exited(w);
  REQUIRE(f->take_failure(w));
  auto back = a.worker_page(1);
  a.start(*f, 1, ::getpid());
  back->set_step(4);
  back->set_recovery_capable(true);
  serve(source, [&] { return a.log_.str().find("is back") != std::string::npos; });
  CHECK(a.standbys == 2);  // for the next loss
}

TEST_CASE("features: in-place recovery falls back to the full restart, saying why in one line") {
  SECTION("a rank that does not advertise it (a Python rank)") {
    RecoveryRig r(2, 3);
    r.pages[1]->set_recovery_capable(true);
    CHECK_FALSE(r.kill(1));
    CHECK(r.a.respawns.empty());
    CHECK_THAT(r.a.log_.str(), Catch::Contains("lost (signal 9 (SIGKILL)); full restart: rank 0 does not advertise "
                                                "in-place recovery"));
  }
  SECTION("no rank advertises it: today's restart, no new line") {
    RecoveryRig r(2, 3);
    CHECK_FALSE(r.kill(1));
    CHECK(r.a.log_.str().empty());
  }
  SECTION("a second failure during the recovery: a survivor that had begun to re-form its group") {
    RecoveryRig r(3, 3);
    for (auto& p : r.pages) p->set_recovery_capable(true);
    REQUIRE(r.kill(1));
    r.pages[2]->set_recovery_capable(false);  // what a survivor does before it touches generation 1's keys
    CHECK_FALSE(r.kill(2));
    CHECK(r.a.respawns.size() == 1);
    CHECK_THAT(r.a.log_.str(), Catch::Contains("ddp-launch: rank 2 (local_rank 2, pid 1002) lost (signal 9 (SIGKILL)) "
                                                "during the recovery of rank 1: a second failure, after it had begun "
                                                "to re-form its group or its training loop had stopped with an error "
                                                "(outside a training step: an evaluation, the epoch's end, a "
                                                "checkpoint); full restart"));
    REQUIRE(r.a.result().recoveries.size() == 1);
    CHECK_FALSE(r.a.result().recoveries[0].completed);
  }
  SECTION("the returning rank dies before it is back (before it advertises): a second failure, not a Python rank") {
    RecoveryRig r(2, 1);
    for (auto& p : r.pages) p->set_recovery_capable(true);
    REQUIRE(r.kill(1));
    auto back = r.a.worker_page(1);  // its new page: not advertising yet
    r.a.start(*r.f, 1, 2001);
    CHECK_FALSE(r.kill(1));
    CHECK_THAT(r.a.log_.str(), Catch::Contains("ddp-launch: rank 1 (local_rank 1, pid 2001) lost (signal 9 (SIGKILL)) "
                                                "during the recovery of rank 1: a second failure; no restart: "
                                                "--max_restarts 1 used up (1 restarts and recoveries)") &&
                                    !Catch::Contains("does not advertise"));
  }
  SECTION("--max_restarts used up: recoveries count against it") {
    RecoveryRig r(2, 1);
    for (auto& p : r.pages) p->set_recovery_capable(true);
    REQUIRE(r.kill(1));
    auto back = r.a.worker_page(1);
    r.a.start(*r.f, 1, ::getpid());
    back->set_recovery_capable(true);
    serve(*dynamic_cast<EventLoop::Source*>(r.f.get()), [&] { return r.a.result().recoveries[0].completed; });
    REQUIRE(r.a.result().recoveries[0].completed);
    CHECK_FALSE(r.kill(1));  // dies again at once
    CHECK_THAT(r.a.log_.str(), Catch::Contains("lost (signal 9 (SIGKILL)); no recovery: --max_restarts 1 used up "
                                                "(1 restarts and recoveries)"));
  }
  SECTION("the lost rank cannot be started again") {
    RecoveryRig r(2, 3);
    for (auto& p : r.pages) p->set_recovery_capable(true);
    r.a.respawn_works = false;
    CHECK_FALSE(r.kill(0));
    CHECK_THAT(r.a.log_.str(), Catch::Contains("full restart: it could not be started again"));
  }
}

// c10d (job_recovery.h): node n0 of 2 nodes x 2 ranks. The generation and
// the budget are the job's: the rendezvous answers before anything starts,
// and another node's recovery reaches this node's ranks' pages.
namespace {
struct JobRecoveryRig {
  explicit JobRecoveryRig(int max_restarts) : a(2, 4) {
    a.plan.opts.max_restarts = max_restarts;
    node.group_world_size = 2;
    node.world_size = 4;
    a.placement.placement = node;
    a.services.agent = &link;
    a.services.job_recovery.emplace(link);
    f = make_in_place_recovery(a);
    for (int lr = 0; lr < 2; ++lr) {
      pages.push_back(a.worker_page(lr));
      pages.back()->set_recovery_capable(true);
      a.start(*f, lr, 1000 + lr);
    }
  }
  bool kill(int lr) {
    WorkerExit w = exit_of(lr, lr, a.pids[lr], SIGKILL);
    f->exited(w);
    return f->take_failure(w);
  }
  void say(RdzvEvent::Kind kind, uint64_t generation, int used, const std::string& text = "", int rank = -1,
           bool used_up = false) {
    RdzvEvent e;
    e.kind = kind;
    e.generation = generation;
    e.used = used;
    e.text = text;
    e.rank = rank;
    e.used_up = used_up;
    CHECK(a.services.job_recovery->heard(e));
  }
  // The job's restarts and recoveries this attempt says it used.
  int used() {
    AttemptResult res;
    f->finish(res);
    return res.restarts_used;
  }
  FakeAttempt a;
  NodePlacement node;
  FakeLink link;
  std::unique_ptr<Feature> f;
  std::vector<std::unique_ptr<ddp::Heartbeat>> pages;
};
}  // namespace

TEST_CASE("features: in-place recovery under c10d takes the job's generation from the rendezvous, and another "
          "node's recovery reaches this node's ranks") {
  SECTION("this node's rank: asked, granted, back") {
    JobRecoveryRig r(3);
    REQUIRE(r.kill(1));  // taken over while the rendezvous answers
    CHECK(r.link.sent == std::vector<std::string>{"recover 3 1"});
    CHECK(r.a.respawns.empty());
    CHECK(r.f->holds_attempt());  // a node whose only rank it was does not end its attempt meanwhile
    r.say(RdzvEvent::Recovery, 5, 2);
    CHECK_FALSE(r.f->holds_attempt());
    REQUIRE(r.a.respawns.size() == 1);
    CHECK(r.a.respawns[0].second.at("DDP_RECOVERY_GENERATION") == "5");
    CHECK(r.pages[0]->recovery_generation() == 5);
    CHECK_THAT(r.a.log_.str(), Catch::Contains("at step 0; bringing back only it, in place (generation 5; the other 3 "
                                                "ranks keep their state on every node; recovery 3 of --max_restarts 3 "
                                                "for the job)"));
    auto back = r.a.worker_page(1);
    r.a.start(*r.f, 1, ::getpid());
    back->set_recovery_capable(true);
    serve(*dynamic_cast<EventLoop::Source*>(r.f.get()), [&] { return r.a.log_.str().find("is back") != std::string::npos; });
    CHECK(r.link.sent.back() == "recovered 5");
    CHECK(r.used() == 3);
  }
  SECTION("another node's rank: this node's ranks get its generation, one line") {
    JobRecoveryRig r(3);
    r.say(RdzvEvent::PeerRecovery, 4, 1, "node n1 (host h1)", 3);
    CHECK(r.pages[0]->recovery_generation() == 4);
    CHECK(r.pages[1]->recovery_generation() == 4);
    CHECK(r.a.log_.str() == "ddp-launch: rank 3 on node n1 (host h1) lost; the 2 ranks here keep their state "
                            "(in-place recovery, generation 4)\n");
    CHECK(r.a.failures.empty());
    // Counted by the node that lost it (its grant may yet be given up).
    CHECK(r.used() == 0);
  }
  SECTION("refused by the rendezvous (another node's recovery runs): a full restart, said why, the lost rank its "
          "root cause") {
    JobRecoveryRig r(3);
    REQUIRE(r.kill(0));
    r.say(RdzvEvent::RecoveryRefused, 0, 1, "the in-place recovery of rank 3 on node n1 (host h1) (generation 2) is "
                                            "under way");
    CHECK(r.a.respawns.empty());
    REQUIRE(r.a.failures.size() == 1);
    CHECK(r.a.failures[0].rank == 0);
    CHECK_THAT(r.a.log_.str(), Catch::Contains("lost (signal 9 (SIGKILL)); full restart: the in-place recovery of rank "
                                                "3 on node n1 (host h1) (generation 2) is under way"));
    CHECK(r.f->root_cause(r.a.result())->rank == 0);
  }
  SECTION("refused: the job's budget is used up") {
    JobRecoveryRig r(2);
    REQUIRE(r.kill(1));
    r.say(RdzvEvent::RecoveryRefused, 0, 2, "--max_restarts 2 used up (2 restarts and recoveries of the job)", -1,
          true);
    CHECK_THAT(r.a.log_.str(), Catch::Contains("; no recovery: --max_restarts 2 used up (2 restarts and recoveries of "
                                                "the job)"));
    CHECK(r.used() == 2);
  }
  SECTION("a second failure during this node's recovery: void in the rendezvous, the full restart counts, not both") {
    JobRecoveryRig r(3);
    REQUIRE(r.kill(1));
    r.say(RdzvEvent::Recovery, 5, 2);
    REQUIRE(r.a.respawns.size() == 1);
    r.pages[0]->set_recovery_capable(false);  // it had begun to re-form its group
    CHECK_FALSE(r.kill(0));
    CHECK(r.link.sent == std::vector<std::string>{"recover 3 1", "recovered void"});
    CHECK_THAT(r.a.log_.str(), Catch::Contains("during the recovery of rank 1: a second failure, after it had begun") &&
                                    Catch::Contains("; full restart"));
    CHECK(r.used() == 2);
  }
  SECTION("a survivor lost before it began to re-form joins the job's recovery, which counts once") {
    JobRecoveryRig r(3);
    REQUIRE(r.kill(1));
    r.say(RdzvEvent::Recovery, 5, 2);
    REQUIRE(r.kill(0));
    REQUIRE(r.a.respawns.size() == 2);
    CHECK(r.a.respawns[1].second.at("DDP_RECOVERY_GENERATION") == "5");
    CHECK(r.link.sent == std::vector<std::string>{"recover 3 1"});
    CHECK_THAT(r.a.log_.str(), Catch::Contains("before it began to re-form its group: bringing it back with rank 1 "
                                                "(generation 5; the other 2 ranks keep their state; the same "
                                                "recovery, 3 of --max_restarts 3)"));
    CHECK(r.used() == 3);
  }
  SECTION("a second local failure while the rendezvous has not answered: full restart") {
    JobRecoveryRig r(3);
    REQUIRE(r.kill(1));
    CHECK_FALSE(r.kill(0));
    CHECK_THAT(r.a.log_.str(), Catch::Contains("while the in-place recovery of rank 1 waited for the rendezvous: a "
                                                "second failure; full restart"));
    // Given up before it began: the rendezvous voids it (it counts not),
    // and its grant, when it comes, starts nothing.
    CHECK(r.link.sent == std::vector<std::string>{"recover 3 1", "recovered void"});
    r.say(RdzvEvent::Recovery, 5, 2);
    CHECK(r.a.respawns.empty());
    CHECK(r.used() == 0);
  }
}

// c10d, a hot spare's takeover (rendezvous.h): the spare's round carries the
// job's generation; its ranks start as returning ranks, and the recovery is
// done (`recovered G`, once) when all are back. Milliseconds.
TEST_CASE("features: a hot spare that took a lost node's place starts its ranks as returning ones and says the "
          "recovery is done once all are back") {
  FakeAttempt a(2, 4);
  a.plan.opts.max_restarts = 3;
  NodePlacement node;
  node.group_rank = 1;
  node.group_world_size = 2;
  node.world_size = 4;
  a.placement.placement = node;
  a.placement.recovery_generation = 2;
  a.placement.recovery_used = 1;
  FakeLink link;
  a.services.agent = &link;
  a.services.job_recovery.emplace(link);
  auto f = make_in_place_recovery(a);
  std::vector<std::unique_ptr<ddp::Heartbeat>> pages;
  for (int lr = 0; lr < 2; ++lr) {
    pages.push_back(a.worker_page(lr));
    a.start(*f, lr, ::getpid());
  }
  CHECK_THAT(a.log_.str(), Catch::Contains("ddp-launch: this node, a hot spare, takes node n1's place in the running "
                                           "round: its 2 ranks come back in place (generation 2; recovery 2 of "
                                           "--max_restarts 3 for the job)"));
  auto& loop = *dynamic_cast<EventLoop::Source*>(f.get());
  pages[0]->set_recovery_capable(true);
  serve(loop, [&] { return a.log_.str().find("rank 0 is back") != std::string::npos; });
  CHECK(link.sent.empty());  // one of two
  pages[1]->set_recovery_capable(true);
  serve(loop, [&] { return a.log_.str().find("rank 1 is back") != std::string::npos; });
  CHECK(link.sent == std::vector<std::string>{"recovered 2"});
  AttemptResult res;
  f->finish(res);
  CHECK(res.restarts_used == 2);
}

// Two ranks lost together (issue 48): the second, lost before it began to
// re-form its group, comes back under the same generation in the same
// recovery, which counts once.
// A returning rank that advertised and ended before the launcher's next
// look at its page (a job that finished within milliseconds of the
// recovery) is back, not "not back".
TEST_CASE("features: in-place recovery counts a returning rank back when it ends before the next poll") {
  RecoveryRig r(2, 3);
  for (auto& p : r.pages) p->set_recovery_capable(true);
  REQUIRE(r.kill(1));
  auto back = r.a.worker_page(1);
  r.a.start(*r.f, 1, ::getpid());  // the page holds this process's pid
  back->set_step(7);
  back->set_recovery_capable(true);
  WorkerExit done = exit_of(1, 1, ::getpid());  // exit 0, no poll in between
  r.f->exited(done);
  CHECK_THAT(r.a.log_.str(), Catch::Contains("ddp-launch: rank 1 is back after "));
  REQUIRE(r.a.result().recoveries.size() == 1);
  CHECK(r.a.result().recoveries[0].completed);
}

TEST_CASE("features: ranks lost together come back in one recovery, and one lost after the group began to re-form "
          "means the full restart") {
  SECTION("a survivor lost before it began to re-form joins the recovery") {
    RecoveryRig r(4, 3);
    for (auto& p : r.pages) {
      p->set_recovery_capable(true);
      p->set_step(7);
    }
    REQUIRE(r.kill(1));
    REQUIRE(r.kill(2));  // its page still says capable: it never touched generation 1
    CHECK(r.a.failures.empty());
    REQUIRE(r.a.respawns.size() == 2);
    CHECK(r.a.respawns[1].first == 2);
    CHECK(r.a.respawns[1].second.at("DDP_RECOVERY_GENERATION") == "1");
    CHECK_THAT(r.a.log_.str(), Catch::Contains("ddp-launch: rank 2 (local_rank 2, pid 1002) lost (signal 9 (SIGKILL)) "
                                                "at step 7, before it began to re-form its group: bringing it back "
                                                "with rank 1 (generation 1; the other 2 ranks keep their state; the "
                                                "same recovery, 1 of --max_restarts 3)"));
    r.a.services.trace.emplace("/unused", "h", 0);
    auto back1 = r.a.worker_page(1);
    r.a.start(*r.f, 1, ::getpid());
    auto back2 = r.a.worker_page(2);
    r.a.start(*r.f, 2, ::getpid());
    back1->set_step(7);
    back2->set_step(7);
    back1->set_recovery_capable(true);
    serve(*dynamic_cast<EventLoop::Source*>(r.f.get()), [&] { return r.a.log_.str().find("rank 1 is back") != std::string::npos; });
    CHECK_THAT(r.a.services.trace->json(), !Catch::Contains("in-place recovery of ranks"));
    back2->set_recovery_capable(true);
    serve(*dynamic_cast<EventLoop::Source*>(r.f.get()), [&] { return r.a.log_.str().find("rank 2 is back") != std::string::npos; });
    REQUIRE(r.a.result().recoveries.size() == 2);
    for (const Recovery& rec : r.a.result().recoveries) {
      CHECK(rec.completed);
      CHECK(rec.generation == 1);
      CHECK(rec.steps_redone == 1);
    }
    CHECK(r.a.result().recoveries_counted() == 1);
    CHECK_THAT(r.a.services.trace->json(), Catch::Contains("{\"name\":\"in-place recovery of ranks 1, 2 (1 step "
                                                           "redone)\",\"cat\":\"launcher\",\"ph\":\"X\""));
    // A later loss is a new recovery, the second of the budget.
    REQUIRE(r.kill(3));
    CHECK_THAT(r.a.log_.str(), Catch::Contains("(generation 2; the other 3 ranks keep their state; recovery 2 of "
                                                "--max_restarts 3)"));
  }
  SECTION("a survivor lost once a returning rank is back: the group under the generation has formed") {
    RecoveryRig r(4, 3);
    for (auto& p : r.pages) p->set_recovery_capable(true);
    REQUIRE(r.kill(1));
    REQUIRE(r.kill(2));
    auto back1 = r.a.worker_page(1);
    r.a.start(*r.f, 1, ::getpid());
    back1->set_recovery_capable(true);  // not polled yet: the loss is seen first
    CHECK_FALSE(r.kill(0));             // it had set its flag again
    CHECK_THAT(r.a.log_.str(), Catch::Contains("rank 1 is back") &&
                                    Catch::Contains("lost (signal 9 (SIGKILL)) during the recovery of ranks 1, 2: a "
                                                    "second failure, after it had begun to re-form its group"));
    REQUIRE(r.a.result().recoveries.size() == 2);
    CHECK(r.a.result().recoveries[0].completed);
    CHECK_FALSE(r.a.result().recoveries[1].completed);
  }
  SECTION("no rank that kept its state is left: full restart") {
    RecoveryRig r(3, 3);
    for (auto& p : r.pages) p->set_recovery_capable(true);
    REQUIRE(r.kill(1));
    REQUIRE(r.kill(2));
    CHECK_FALSE(r.kill(0));
    CHECK_THAT(r.a.log_.str(), Catch::Contains("lost (signal 9 (SIGKILL)) during the recovery of ranks 1, 2: no rank "
                                                "that kept its state is left; full restart"));
  }
}

TEST_CASE("report: an in-place recovery is in the run summary and --summary_json") {
  AttemptResult a;
  Recovery r;
  r.rank = 1;
  r.local_rank = 1;
  r.generation = 1;
  r.cause = "signal 9 (SIGKILL)";
  r.completed = true;
  r.seconds = 0.845;
  r.steps_redone = 1;
  a.recoveries.push_back(r);
  a.exits.push_back(exit_of(0, 0, 100));
  RunTotals t;
  CHECK_THAT(format_run_summary({a}, t),
             Catch::Contains("  recovery: rank 1 lost (signal 9 (SIGKILL)), back in place after 0.84 s, 1 step redone "
                             "(attempt 0, generation 1)") ||
                 Catch::Contains("back in place after 0.85 s"));
  CHECK_THAT(format_summary_json({a}, t),
             Catch::Contains("\"recoveries\": [{\"rank\": 1, \"local_rank\": 1, \"generation\": 1, \"cause\": \"signal 9 "
                             "(SIGKILL)\", \"completed\": true, \"seconds\": 0.845, \"steps_redone\": 1}]"));
}
