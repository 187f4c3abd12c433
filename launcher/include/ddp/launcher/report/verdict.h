#pragma once
// A feature's word on one worker's exit (supervise/features/), in the words
// the failure report and the run summary show. A feature adds it to the
// WorkerExit it is handed (Feature::exited, failed); report.cpp and
// summary.cpp render every verdict the same way, so a new verdict needs no
// field in WorkerExit and no line of report code. Verdicts that steer the
// attempt (a stall's exit code 124, an expired timer scope's failure time)
// stay typed fields of WorkerExit: Outcome and exit_code() read them.
// Pure data; never formats itself.

#include <string>
#include <string_view>

namespace ddp::launcher {

struct Verdict {
  std::string feature;  // who said it, as its file is named: "exit_verdict"
  // The root cause block's line "  <label> : <text>" (after its message),
  // and "; <text>" on the worker's line under "Other workers".
  std::string label;    // "in exit"
  std::string text;
  // After ", " on the restart line when this worker is the root cause; ""
  // adds nothing.
  std::string restart_note;
  // After a space in the summary table's status cell ("SIGABRT in exit");
  // "" adds nothing.
  std::string status;
  // --summary_json: "verdicts": {"<json_key>": <json_value>} in the worker's
  // object, written only when some verdict has a key. json_value is one JSON
  // value's text (a number's text; ddp::json::quoted for a string).
  std::string json_key;
  std::string json_value;
};

}  // namespace ddp::launcher
