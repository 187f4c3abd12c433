#include "ddp/launcher/report/report.h"

#include "ddp/common/untrusted_text.h"
#include "ddp/launcher/diagnose/flight_recorder.h"
#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/base/signal_names.h"
#include "ddp/launcher/base/time_text.h"

#include <csignal>
#include <ctime>
#include <sstream>

namespace ddp::launcher {

std::string WorkerExit::status_text() const {
  if (!stalled.empty())
    return "stalled; ended by the launcher: " + (signaled ? "signal " + std::to_string(code) + " (" + signal_name(code) + ")"
                                                           : "exit code " + std::to_string(code));
  if (signaled) return "signal " + std::to_string(code) + " (" + signal_name(code) + ")";
  return "exit code " + std::to_string(code);
}

const Verdict* WorkerExit::verdict(std::string_view feature) const {
  for (const Verdict& v : verdicts)
    if (v.feature == feature) return &v;
  return nullptr;
}

std::string WorkerExit::reason_text() const {
  if (!spawn_error.empty()) return spawn_error;
  if (!stalled.empty()) return "it stalled (no progress for " + std::to_string(static_cast<long long>(stalled_idle_s)) + " s)";
  if (expired_scope) return format_expired_scope(*expired_scope);
  return status_text();
}

std::optional<WorkerExit> earliest_failure(const std::vector<WorkerExit>& exits) {
  // A failure its error file marks as following another rank's is the root
  // cause only when no other failure is there: the rank it follows (or any
  // independent failure) wins whatever the order the error files landed in.
  const WorkerExit* best = nullptr;
  for (const WorkerExit& w : exits) {
    if (!w.failed()) continue;
    const bool better = !best || (w.follower() != best->follower() ? !w.follower()
                                                                    : w.failure_time() < best->failure_time());
    if (better) best = &w;
  }
  if (!best) return std::nullopt;
  return *best;
}

int AttemptResult::exit_code() const {
  if (root_cause) {
    if (root_cause->expired_scope) return 124;  // a launcher-detected timeout, as timeout(1)
    // The earliest failure wrote its error file, then the teardown that a
    // later failure started stopped it before it could exit: its own code is
    // lost (it is not the launcher's SIGTERM), so the code of the failure that
    // started the teardown stands in for it.
    if (root_cause->after_teardown && root_cause->error)
      for (const WorkerExit& w : exits)
        if (w.failed() && !w.after_teardown) return w.shell_code();
    return root_cause->shell_code();
  }
  if (launcher_signal) return 128 + launcher_signal;
  if (!rdzv_stop.empty()) return 1;
  return 0;
}

namespace {

std::string indent(const std::string& text, const std::string& pad) {
  std::ostringstream out;
  std::istringstream in(text);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (!first) out << "\n";
    out << pad << line;
    first = false;
  }
  return out.str();
}

// A worker's words (its error file, its stderr) and other nodes' reasons
// are bytes anyone could have written: control characters and bytes that
// are not UTF-8 are shown as \xNN, never sent to the terminal raw.
std::string shown(const std::string& untrusted) { return ddp::visible_text(untrusted, ddp::Newlines::Keep); }

// How a worker that exited during the teardown ended. A signal the launcher
// never sends (it sends SIGTERM, then SIGKILL, or forwards its own) came from
// the worker itself: torch's Gloo abort in its exit, say. Saying "after the
// launcher stopped the group" there suggested the launcher caused it.
std::string teardown_text(const WorkerExit& w, const AttemptResult& a) {
  if (!w.after_teardown) return "";
  const int sig = w.code;
  if (!w.signaled || sig == SIGTERM || sig == SIGKILL || sig == a.launcher_signal || sig == a.signal_during_teardown)
    return ", after the launcher stopped the group";
  std::string when;
  if (a.root_cause && w.time >= a.root_cause->failure_time())
    when = ", " + fixed_text(std::chrono::duration<double, std::milli>(w.time - a.root_cause->failure_time()).count(), 0) +
           " ms after rank " + std::to_string(a.root_cause->rank) + " failed";
  return ", by itself (the launcher sends SIGTERM, then SIGKILL) while the group was being stopped" + when;
}

std::string message_of(const WorkerExit& w) {
  if (!w.stalled.empty()) return w.stalled;
  if (!w.spawn_error.empty()) return w.spawn_error;
  if (w.expired_scope)
    return "rank " + std::to_string(w.rank) + " (local_rank " + std::to_string(w.local_rank) + ", pid " +
           std::to_string(w.expired_scope->pid) + "): " + format_expired_scope(*w.expired_scope);
  if (w.error && !w.error->message.empty()) return w.error->message;
  if (w.signaled && !w.oom.empty()) return w.oom;  // the kernel's word beats any older line of its stderr
  if (!w.stderr_message.empty()) return w.stderr_message;  // its own words, from its stderr
  if (w.signaled)
    return "Signal " + std::to_string(w.code) + " (" + signal_name(w.code) + ") received by PID " +
           std::to_string(w.pid);
  if (!w.stderr_log.empty()) return "(no error file written; see its stderr: " + w.stderr_log + ")";
  return "(no error file written; see the worker's own output above)";
}

std::string rss_text(long kb) {
  if (kb >= 10 * 1024) return std::to_string(kb / 1024) + " MiB";
  return std::to_string(kb) + " KiB";
}

void root_cause_block(std::ostringstream& s, const WorkerExit& w, const std::string& host) {
  s << "  time       : " << format_time(w.time) << "\n"
    << "  host       : " << host << "\n"
    << "  rank       : " << w.rank << " (local_rank: " << w.local_rank << ")\n"
    << "  pid        : " << (w.pid > 0 ? std::to_string(w.pid) : "- (never started)") << "\n"
    << "  exitcode   : ";
  if (w.expired_scope)  // the launcher's code for it, then what the worker itself ended with
    s << "124 (timer scope '" << w.expired_scope->scope_id << "' expired; the worker ended with " << w.status_text()
      << ")\n";
  else
    s << w.shell_code() << " (" << w.status_text()
      << (w.after_teardown && w.stalled.empty() ? ", stopped by the launcher after it wrote its error file" : "") << ")\n";
  if (w.max_rss_kb > 0) s << "  max_rss    : " << rss_text(w.max_rss_kb) << "\n";
  s
    << "  error_file : " << (w.error ? w.error_file : "<none>") << "\n"
    << "  message    : " << shown(message_of(w)) << "\n";
  for (const Verdict& v : w.verdicts) {  // its label padded as the block's own: "  in exit    : "
    if (v.label.empty()) continue;
    s << "  " << v.label << std::string(v.label.size() < 10 ? 10 - v.label.size() : 0, ' ') << " : " << shown(v.text)
      << "\n";
  }
  if (!w.stdout_log.empty()) s << "  stdout_log : " << w.stdout_log << "\n";
  if (!w.stderr_log.empty()) s << "  stderr_log : " << w.stderr_log << "\n";
  if (w.error && !w.error->callstack.empty())
    s << "  traceback  :\n" << indent(shown(w.error->callstack), "    ") << "\n";
  else if (!w.stderr_traceback.empty() && (!w.error || w.error->message.empty()))
    s << "  traceback  : (from its stderr; no error file)\n" << indent(shown(w.stderr_traceback), "    ") << "\n";
}

// ", in its exit after its program had finished": what the root cause's
// verdicts add to the restart line.
std::string restart_notes(const WorkerExit& w) {
  std::string out;
  for (const Verdict& v : w.verdicts)
    if (!v.restart_note.empty()) out += ", " + v.restart_note;
  return out;
}

}  // namespace

std::string format_restart_line(const AttemptResult& a, int max_restarts, int restart) {
  std::ostringstream s;
  s << "ddp-launch: attempt " << a.attempt << " failed: rank " << a.root_cause->rank << " "
    << (a.root_cause->expired_scope ? "timer scope '" + a.root_cause->expired_scope->scope_id + "' expired"
                                    : a.root_cause->status_text())
    << (a.root_cause->oom.empty() ? "" : ", " + a.root_cause->oom)
    << restart_notes(*a.root_cause)
    << "; restarting the group (restart " << (restart > 0 ? restart : a.attempt + 1) << " of "
    << max_restarts << ")";
  return s.str();
}

std::string format_failure_report(const std::vector<AttemptResult>& attempts, const std::string& host,
                                  int max_restarts) {
  if (attempts.empty() || attempts.back().succeeded()) return "";
  const AttemptResult& last = attempts.back();
  std::ostringstream s;
  const std::string rule(72, '=');
  s << rule << "\n";
  if (last.launcher_signal) {
    s << "ddp-launch: stopped by " << signal_name(last.launcher_signal) << " (attempt " << last.attempt
      << "); forwarded it to every worker\n";
  } else if (!last.root_cause && !last.rdzv_stop.empty()) {
    s << "ddp-launch: the rendezvous stopped this node's workers (attempt " << last.attempt << ", max_restarts "
      << max_restarts << "): " << shown(last.rdzv_stop) << "\n";
  } else {
    s << "ddp-launch: worker group FAILED (attempt " << last.attempt << ", max_restarts " << max_restarts
      << ")\n";
  }
  // c10d: this node's failure came first, but the job was ended (another
  // node's launcher stopped, a node out of restarts): that is why there is
  // no restart, whichever of the two this node heard first.
  if (last.root_cause && last.rdzv_abort && !last.rdzv_stop.empty())
    s << "ddp-launch: not restarted: the job was ended: " << shown(last.rdzv_stop) << "\n";
  if (last.signal_during_teardown)
    s << "ddp-launch: got " << signal_name(last.signal_during_teardown)
      << " while stopping the failed group; forwarded it, no restart; the exit code is the root cause's\n";
  for (const AttemptResult& a : attempts) {
    if (!a.root_cause) continue;
    s << (&a == &last ? "Root cause (earliest failure)" : "Earlier attempt " + std::to_string(a.attempt))
      << (&a == &last ? "" : " root cause") << ":\n";
    root_cause_block(s, *a.root_cause, host);
  }
  bool header = false;
  // Workers the launcher stopped say little each; with thousands of them
  // only the first few are listed, the rest counted.
  constexpr int kStoppedShown = 8;
  int stopped_shown = 0, stopped_hidden = 0;
  for (const WorkerExit& w : last.exits) {
    if (last.root_cause && w.pid == last.root_cause->pid) continue;
    const bool has_message = (w.error && !w.error->message.empty()) || !w.stderr_message.empty();
    if (w.after_teardown && !has_message && stopped_shown++ >= kStoppedShown) {
      ++stopped_hidden;
      continue;
    }
    if (!header) {
      s << "Other workers (attempt " << last.attempt << "):\n";
      header = true;
    }
    s << "  rank " << w.rank << " (local_rank " << w.local_rank << ", pid " << w.pid << "): " << w.status_text()
      << teardown_text(w, last);
    if (w.max_rss_kb > 0) s << ", max_rss " << rss_text(w.max_rss_kb);
    if (!w.oom.empty()) s << "; " << w.oom;
    for (const Verdict& v : w.verdicts)
      if (!v.text.empty()) s << "; " << shown(v.text);
    s << "\n";
    // A later failure's own words help too (e.g. the peer's "Connection reset").
    if (has_message)
      s << "    message: " << shown(w.error && !w.error->message.empty() ? w.error->message : w.stderr_message)
        << (w.follower() ? " (it followed rank " + std::to_string(*w.error->follows_rank) + "'s failure)" : "")
        << "\n";
  }
  if (stopped_hidden > 0) s << "  ... and " << stopped_hidden << " more workers stopped by the launcher\n";
  s << format_unkillable_block(last.unkillable, kAfterKillWaitS, last.attempt < max_restarts);
  for (const AttemptResult& a : attempts) s << format_flight_recorder_block(a.fr_dumps, a.fr_prefix);
  if (!last.stacks.empty()) s << last.stacks;  // where the ranks were (stack_dump.h)
  s << rule << "\n";
  return s.str();
}

}  // namespace ddp::launcher
