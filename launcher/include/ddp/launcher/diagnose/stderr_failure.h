#pragma once
// Why a worker failed, read from the end of its stderr (output_tail.h), for
// a failure without an error file (no @record, a C++ worker off the runtime):
//  - the last Python traceback: from the last "Traceback (most recent call
//    last):" to its exception line ("ValueError: bad batch",
//    "torch.distributed.DistStoreError: Timed out ..."); the header may sit
//    after a '\r' progress bar on its line; lines of other writers between
//    the traceback's lines (a DataLoader child, a C++ thread's warnings) are
//    skipped; when it was raised while handling another exception (or from
//    one), that one's exception line is named too;
//  - libstdc++'s terminate handler: "terminate called after throwing an
//    instance of 'X'" and "  what():  text" give "X: text" (the first line of
//    what(); c10::Error's "Exception raised from" lines stay in the
//    traceback); "terminate called without an active exception" as it is;
// whichever came last. A traceback without its exception line (killed while
// printing it; another process writing inside its lines) quotes nothing,
// unless it was chained to a complete one. ANSI colour sequences (Python 3.13 colours its
// tracebacks on a terminal) are removed first, and so is the "[rank1]: " that torch 2.x's
// excepthook puts before each line of a traceback once init_process_group has run. Pure: a string in, nothing
// read or written; the supervisor calls it once per failed worker after the
// group is gone, the report (report.h) prints the result, quoting its
// control bytes (the result itself keeps the worker's bytes).

#include <optional>
#include <string>
#include <string_view>

namespace ddp::launcher {

struct StderrFailure {
  std::string message;    // the exception line, or "X: what()" of a C++ terminate
  std::string traceback;  // its last frames and the exception line as printed (or the terminate lines)
};

// nullopt when the text holds neither (or a traceback that never got to its
// exception line: the worker was killed while printing it).
std::optional<StderrFailure> failure_from_stderr(std::string_view text, int max_frames = 4);

}  // namespace ddp::launcher
