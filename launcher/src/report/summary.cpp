#include "ddp/launcher/report/summary.h"

#include "ddp/launcher/base/rank_list.h"
#include "ddp/launcher/base/number_text.h"
#include "ddp/launcher/base/signal_names.h"

#include <algorithm>
#include <cstdio>
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
  if (w.signaled && w.died_exiting_s) return std::string(signal_name(w.code)) + " in exit";
  if (w.signaled) return signal_name(w.code);
  return "exit " + std::to_string(w.code);
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

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string json_or_null(const std::string& s) { return s.empty() ? "null" : json_string(s); }

std::string ms_cell(double ms) { return fixed_text(ms, ms >= 100 ? 0 : ms >= 10 ? 1 : 2); }

std::string steps_json(const std::optional<RankStepStats>& st) {
  if (!st) return "null";
  return "{\"steps\": " + std::to_string(st->steps) + ", \"steps_per_s\": " + fixed_text(st->steps_per_s, 3) +
         ", \"step_ms_median\": " + fixed_text(st->step_ms_median, 3) + ", \"step_ms_p90\": " + fixed_text(st->step_ms_p90, 3) +
         ", \"work_ms_median\": " + fixed_text(st->work_ms_median, 3) + ", \"wait_share\": " + fixed_text(st->wait_share, 4) +
         ", \"relative_score\": " + fixed_text(st->relative_score, 3) +
         ", \"individual_score\": " + fixed_text(st->individual_score, 3) + "}";
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
    for (const char* h : {"steps", "step_ms", "p90_ms", "work_ms", "wait", "score"}) head.push_back(h);
    for (size_t w : {7, 8, 8, 8, 5, 6}) width.push_back(w);
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
  const size_t never = last.never_started.size();
  if (never > 0)
    s << "  " << ranks_text(last.never_started) << " (" << never << (never == 1 ? " worker) was" : " workers) were")
      << " never started: the attempt was stopped before their turn\n";
  return s.str();
}

std::string format_summary_json(const std::vector<AttemptResult>& attempts, const RunTotals& totals) {
  std::ostringstream s;
  s << "{\"exit_code\": " << totals.exit_code << ", \"wall_s\": " << fixed_text(totals.wall_s, 3)
    << ", \"host\": " << json_string(totals.host) << ", \"log_dir\": " << json_or_null(totals.log_dir)
    << ", \"attempts\": [";
  for (size_t i = 0; i < attempts.size(); ++i) {
    const AttemptResult& a = attempts[i];
    s << (i ? ", " : "") << "\n  {\"attempt\": " << a.attempt << ", \"exit_code\": " << a.exit_code()
      << ", \"workers\": [";
    const auto workers = by_rank(a);
    for (size_t j = 0; j < workers.size(); ++j) {
      const WorkerExit& w = *workers[j];
      s << (j ? "," : "") << "\n    {\"rank\": " << w.rank << ", \"local_rank\": " << w.local_rank
        << ", \"pid\": " << (w.pid > 0 ? std::to_string(w.pid) : "null")
        << ", \"started\": " << (w.pid > 0 ? "true" : "false") << ", \"exit_code\": " << w.shell_code()
        << ", \"signal\": " << (w.signaled ? json_string(signal_name(w.code)) : "null")
        << ", \"wall_s\": " << fixed_text(w.wall_s, 3) << ", \"cpu_s\": " << fixed_text(w.cpu_s, 3)
        << ", \"max_rss_kb\": " << w.max_rss_kb << ", \"error_file\": " << json_or_null(w.error ? w.error_file : "")
        << ", \"stdout_log\": " << json_or_null(w.stdout_log) << ", \"stderr_log\": " << json_or_null(w.stderr_log)
        << ", \"steps\": " << steps_json(w.steps) << "}";
    }
    s << "]";
    if (!a.never_started.empty()) {
      s << ", \"never_started\": [";
      for (size_t j = 0; j < a.never_started.size(); ++j) s << (j ? ", " : "") << a.never_started[j];
      s << "]";
    }
    if (!a.unkillable.empty()) {
      s << ", \"not_killed\": [";
      for (size_t j = 0; j < a.unkillable.size(); ++j) {
        const UnkillableProcess& u = a.unkillable[j];
        s << (j ? ", " : "") << "{\"rank\": " << u.rank << ", \"pid\": " << u.pid
          << ", \"worker\": " << (u.worker ? "true" : "false") << ", \"state\": " << json_string(std::string(1, u.proc.state))
          << ", \"wchan\": " << json_or_null(u.proc.wchan) << "}";
      }
      s << "]";
    }
    s << "}";
  }
  s << "]}\n";
  return s.str();
}

}  // namespace ddp::launcher
