#pragma once
// Runs the worker group and its restarts: the policy over WorkerGroup (which
// owns the processes) and Watchdog (which cleans up after a SIGKILL). Event
// driven: one poll on the signalfd (SIGCHLD and the forwarded signals) with
// the shutdown grace as its only timeout; no sleep loops. Policy:
//  - the first failure seen (a worker exits non-zero or dies by a signal, or
//    a worker cannot be started) starts the teardown: every group gets
//    SIGTERM, and SIGKILL once shutdown_timeout has passed;
//  - the root cause is the earliest failure (error file time, else exit
//    time; see report.h), which need not be the first one reaped;
//  - the --signals_to_handle signals (default SIGINT/SIGTERM/SIGHUP/SIGQUIT)
//    are forwarded to every group, then the same grace and kill; a second
//    SIGINT kills at once. A signal during a
//    failure's teardown is forwarded and ends the job, but the exit code
//    stays the root cause's;
//  - an attempt ends only when no process of its groups is left (a worker's
//    leftover children get SIGTERM once every worker has exited, then the
//    same grace and SIGKILL), so a restart never meets the old group's
//    processes (a DataLoader child holding MASTER_PORT). A process still
//    there kAfterKillWaitS after SIGKILL (D state) is named from /proc and
//    left behind (unkillable.h): the attempt ends without it and is not
//    restarted, since a new group would meet it;
//  - a worker dead of a SIGKILL the launcher did not send is checked
//    against the OOM killer (oom_kill.h); every worker gets the flight
//    recorder's dump prefix in the run, and a failed attempt's dumps are
//    listed (flight_recorder.h);
//  - with restarts left, a failed group is restarted whole with
//    TORCHELASTIC_RESTART_COUNT + 1; a spawn failure or a launcher signal
//    is never restarted;
//  - spawning checks for signals and failures after every worker, so a
//    SIGTERM during the start of thousands of workers is not ignored;
//  - with log options each worker's streams go where plan_output() says
//    (log files under attempt_<n>/, /dev/null, or an OutputTee pipe that
//    the same poll serves, which also feeds --duplicate_*_filters' files);
//    without them, no pipe and no extra fd exists;
//  - --event_log_handler console: torchrun's status events (event_log.h);
//  - stacks of every running worker (stack_dump.h; Attempt::dump_all_stacks)
//    on SIGQUIT before it is forwarded, on SIGUSR2 unless it is a handled
//    signal (a live dump: nothing else happens), and before the SIGKILL of
//    workers that outlived the grace period; the summary is logged at once
//    and the attempt's last one ends the failure report;
//  - TORCHELASTIC_ENABLE_FILE_TIMER=1: torchrun's file timer, served in the
//    same poll (file_timer_server.h); an expired scope's rank gets the
//    scope's signal and is the attempt's root cause, exit code 124;
//  - at the end of every run: the summary table (summary.h), the failure
//    report, and --summary_json written atomically. When the report names
//    error files in the private run directory, that directory is kept
//    (and the watchdog told so), so the paths it prints stay valid.
// The launcher is a child subreaper, so orphaned descendants of workers are
// reaped too (and never mistaken for workers). A watchdog that dies (reaped
// like any child, told apart by its pid) is replaced at once, with one
// warning line, and told the live groups; at the end it is reaped, never
// left as a zombie (watchdog.h).

#include "ddp/launcher/config/plan.h"
#include "ddp/launcher/report/report.h"

#include <ostream>
#include <vector>

namespace ddp::launcher {

class Supervisor {
 public:
  Supervisor(LaunchPlan cfg, std::ostream& log);

  // Runs every attempt; prints restart lines and the final failure report to
  // `log`. Returns the launcher's exit code: 0, the root cause's shell-style
  // code (128+N for signal N), or 128+N when the launcher got signal N.
  int run();

  const std::vector<AttemptResult>& attempts() const { return attempts_; }

 private:
  LaunchPlan cfg_;
  std::ostream& log_;
  std::vector<AttemptResult> attempts_;
};

// A port on which a TCP server can listen right now: 0 asks the kernel for a
// free one. Throws UsageError naming the port when it is taken.
int reserve_check_port(int port);

}  // namespace ddp::launcher
