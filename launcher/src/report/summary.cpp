#include "ddp/launcher/report/summary.h"

#include "ddp/launcher/base/rank_list.h"
#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/base/signal_names.h"
#include "ddp/common/json_writer.h"

#include <algorithm>
#include <sstream>

namespace ddp::launcher {

namespace {

std::vector<const WorkerExit*> by_rank(const AttemptResult& a) {
  std::vector<const WorkerExit*> out;
  for (const WorkerExit& w : a.exits) out.push_back(&w);
  std::stable_sort(out.begin(), out.end(), [](const WorkerExit* x, const WorkerExit* y) { return x->rank < y->rank; });
  return out;
}

std::string status_of(const WorkerExit& w) {
  if (w.pid <= 0) return "not started";
  if (w.signaled && !w.oom.empty()) return "OOM-killed";
  std::string status = w.signaled ? std::string(signal_name(w.code)) : "exit " + std::to_string(w.code);
  for (const Verdict& v : w.verdicts)  // "SIGABRT in exit"
    if (!v.status.empty()) status += " " + v.status;
  return status;
}

// "verdicts": {"<key>": value, ...}, only when a feature gave its verdict a key.
void verdicts_json(json::Writer& j, const WorkerExit& w) {
  const bool any = std::any_of(w.verdicts.begin(), w.verdicts.end(), [](const Verdict& v) { return !v.json_key.empty(); });
  if (!any) return;
  j.key("verdicts").object();
  for (const Verdict& v : w.verdicts)
    if (!v.json_key.empty()) v.json_value.empty() ? j.key(v.json_key).null() : j.key(v.json_key).raw(v.json_value);
  j.end();
}

std::string rss_of(long kb) {
  if (kb <= 0) return "-";
  if (kb >= 10 * 1024) return std::to_string(kb / 1024) + " MiB";
  return std::to_string(kb) + " KiB";
}

std::string pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string ms_cell(double ms) { return fixed_text(ms, ms >= 100 ? 0 : ms >= 10 ? 1 : 2); }

void steps_json(json::Writer& j, const std::optional<RankStepStats>& st) {
  if (!st) {
    j.null();
    return;
  }
  j.object().key("steps").integer(st->steps);
  j.key("steps_per_s").number(fixed_text(st->steps_per_s, 3));
  j.key("step_ms_median").number(fixed_text(st->step_ms_median, 3));
  j.key("step_ms_p90").number(fixed_text(st->step_ms_p90, 3));
  j.key("work_ms_median").number(fixed_text(st->work_ms_median, 3));
  j.key("wait_share").number(fixed_text(st->wait_share, 4));
  j.key("relative_score").number(fixed_text(st->relative_score, 3));
  j.key("individual_score").number(fixed_text(st->individual_score, 3)).end();
}

}  // namespace

std::string format_run_summary(const std::vector<AttemptResult>& attempts, const RunTotals& totals) {
  if (attempts.empty()) return "";
  const AttemptResult& last = attempts.back();
  std::ostringstream s;
  s << "ddp-launch: run summary (attempt " << last.attempt << ", exit code " << totals.exit_code << ", "
    << fixed_text(totals.wall_s, 2) << " s";
  if (!totals.log_dir.empty()) s << ", logs in " << totals.log_dir;
  s << ")\n";
  std::vector<std::string> head = {"rank", "local_rank", "pid", "status", "wall_s", "cpu_s", "max_rss"};
  std::vector<size_t> width = {6, 10, 9, 12, 9, 9, 9};
  std::vector<bool> right = {true, true, true, false, true, true, true};
  // Ranks that marked steps on their heartbeat page (step_stats.cpp): where each step went.
  const bool steps = std::any_of(last.exits.begin(), last.exits.end(), [](const WorkerExit& w) { return w.steps.has_value(); });
  if (steps) {
    // Several nodes: the score is against this node's fastest rank (the
    // launcher has only its own ranks' whole-attempt numbers), labelled so;
    // the straggler line compares every node's windows (issue 51 item 11).
    for (const char* h : {"steps", "step_ms", "p90_ms", "work_ms", "wait", totals.several_nodes ? "node_score" : "score"})
      head.push_back(h);
    for (size_t w : {7, 8, 8, 8, 5, totals.several_nodes ? 10 : 6}) width.push_back(w);
    for (int i = 0; i < 6; ++i) right.push_back(true);
  }
  auto row = [&](const std::vector<std::string>& cells) {
    std::string line = " ";
    for (size_t i = 0; i < cells.size(); ++i) line += " " + pad(cells[i], width[i], right[i]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    s << line << "\n";
  };
  const auto workers = by_rank(last);
  for (const WorkerExit* w : workers) width[3] = std::max(width[3], status_of(*w).size());  // "SIGSEGV in exit"
  row(head);
  int shown = 0;
  for (const WorkerExit* w : workers) {
    if (shown++ >= kSummaryRows) break;
    std::vector<std::string> cells = {std::to_string(w->rank), std::to_string(w->local_rank),
                                      w->pid > 0 ? std::to_string(w->pid) : "-", status_of(*w), fixed_text(w->wall_s, 2),
                                      fixed_text(w->cpu_s, 2), rss_of(w->max_rss_kb)};
    if (steps) {
      if (const auto& st = w->steps)
        for (const std::string& c : {std::to_string(st->steps), ms_cell(st->step_ms_median), ms_cell(st->step_ms_p90),
                                     ms_cell(st->work_ms_median), fixed_text(st->wait_share * 100, 0) + "%",
                                     fixed_text(st->relative_score, 2)})
          cells.push_back(c);
      else
        for (int i = 0; i < 6; ++i) cells.push_back("-");
    }
    row(cells);
  }
  // Workers SIGKILL could not end (unkillable.h): never reaped, so no rusage.
  for (const UnkillableProcess& u : last.unkillable)
    if (u.worker) row({std::to_string(u.rank), std::to_string(u.local_rank), std::to_string(u.pid), "not killed", "-", "-", "-"});
  if (static_cast<int>(workers.size()) > kSummaryRows)
    s << "  ... and " << workers.size() - kSummaryRows << " more ranks ("
      << (totals.summary_json ? "every rank is in --summary_json" : "--summary_json FILE lists every rank") << ")\n";
  if (steps && totals.several_nodes)
    s << "  node_score: against the fastest rank of this node; the straggler line compares the ranks of every node\n";
  // c10d: the hot spares of this attempt's round, on every node's summary.
  for (const NodeReplacement& r : last.replaced)
    s << "  node n" << r.node_rank << ": host " << r.host << " (pid " << r.pid << "), a hot spare, replaced host "
      << r.replaced_host << " (pid " << r.replaced_pid << ")\n";
  // In-place recoveries (supervise/features/recovery.cpp), of every attempt.
  for (const AttemptResult& a : attempts)
    for (const Recovery& r : a.recoveries)
      s << "  recovery: rank " << r.rank << " lost (" << r.cause << ")"
        << (r.completed ? ", back in place after " + fixed_text(r.seconds, 2) + " s, " + std::to_string(r.steps_redone) +
                              (r.steps_redone == 1 ? " step" : " steps") + " redone"
                        : ", not back: a second failure came first")
        << " (attempt " << a.attempt << ", generation " << r.generation << ")\n";
  const size_t never = last.never_started.size();
  if (never > 0)
    s << "  " << ranks_text(last.never_started) << " (" << never << (never == 1 ? " worker) was" : " workers) were")
      << " never started: the attempt was stopped before their turn\n";
  return s.str();
}

std::string format_summary_json(const std::vector<AttemptResult>& attempts, const RunTotals& totals) {
  // One attempt, and one worker, a line (the workers' commas end their lines).
  constexpr json::Layout kAttempts{", ", ": ", "\n  "};
  constexpr json::Layout kWorkers{",", ": ", "\n    "};
  json::Writer j(json::Ascii::utf8);
  j.object().key("exit_code").integer(totals.exit_code).key("wall_s").number(fixed_text(totals.wall_s, 3));
  j.key("host").string(totals.host).key("log_dir").string_or_null(totals.log_dir);
  j.key("attempts").array(kAttempts);
  for (const AttemptResult& a : attempts) {
    j.object().key("attempt").integer(a.attempt).key("exit_code").integer(a.exit_code());
    j.key("workers").array(kWorkers);
    for (const WorkerExit* w : by_rank(a)) {
      j.object().key("rank").integer(w->rank).key("local_rank").integer(w->local_rank);
      j.key("pid");
      w->pid > 0 ? j.integer(w->pid) : j.null();
      j.key("started").boolean(w->pid > 0).key("exit_code").integer(w->shell_code());
      j.key("signal");
      w->signaled ? j.string(signal_name(w->code)) : j.null();
      j.key("wall_s").number(fixed_text(w->wall_s, 3)).key("cpu_s").number(fixed_text(w->cpu_s, 3));
      j.key("max_rss_kb").integer(w->max_rss_kb).key("error_file").string_or_null(w->error ? w->error_file : "");
      j.key("stdout_log").string_or_null(w->stdout_log).key("stderr_log").string_or_null(w->stderr_log);
      steps_json(j.key("steps"), w->steps);
      verdicts_json(j, *w);
      j.end();
    }
    j.end();
    if (!a.replaced.empty()) {
      j.key("replaced").array();
      for (const NodeReplacement& r : a.replaced) {
        j.object().key("node_rank").integer(r.node_rank).key("host").string(r.host).key("pid").string(r.pid);
        j.key("replaced_host").string(r.replaced_host).key("replaced_pid").string(r.replaced_pid).end();
      }
      j.end();
    }
    if (!a.never_started.empty()) {
      j.key("never_started").array();
      for (const int r : a.never_started) j.integer(r);
      j.end();
    }
    if (!a.recoveries.empty()) {
      j.key("recoveries").array();
      for (const Recovery& r : a.recoveries) {
        j.object().key("rank").integer(r.rank).key("local_rank").integer(r.local_rank);
        j.key("generation").integer(static_cast<long long>(r.generation)).key("cause").string(r.cause);
        j.key("completed").boolean(r.completed).key("seconds");
        r.completed ? j.number(fixed_text(r.seconds, 3)) : j.null();
        j.key("steps_redone").integer(static_cast<long long>(r.steps_redone)).end();
      }
      j.end();
    }
    if (!a.unkillable.empty()) {
      j.key("not_killed").array();
      for (const UnkillableProcess& u : a.unkillable) {
        j.object().key("rank").integer(u.rank).key("pid").integer(u.pid).key("worker").boolean(u.worker);
        j.key("state").string(std::string(1, u.proc.state)).key("wchan").string_or_null(u.proc.wchan).end();
      }
      j.end();
    }
    j.end();
  }
  j.end().end();
  return j.text() + "\n";
}

}  // namespace ddp::launcher
