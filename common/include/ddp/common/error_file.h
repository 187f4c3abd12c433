#pragma once
// The torchelastic error file (TORCHELASTIC_ERROR_FILE): a worker writes one
// when it dies of an uncaught error, the launcher reads it for its failure
// report. Format, as Python's @record writes it:
//   {"message": {"message": "<Type>: <msg>",
//                "extraInfo": {"py_callstack": "<trace>", "timestamp": "<unix s>"}}}
// Newer writers may put a plain string under "message"; both are read.
// ddp-launch's workers may add "follows_rank": "<r>" to extraInfo (a string,
// like torchelastic's timestamp, so Python's readers keep working): the rank
// failed only because rank r did (ddp/worker/peer_failure.h).
// Writing is atomic (write_file_atomically) so a reader never sees half a file.
// The file is always valid JSON in UTF-8: a byte of the message or the
// callstack that is not UTF-8 is written as the text \xNN (untrusted_text.h),
// so Python's json.load and the launcher read it; reading is as lenient
// with other writers' files (see read_error_file).

#include <cstddef>
#include <optional>
#include <string>

namespace ddp {

// The most of an error file the launcher reads (a worker's message of
// hundreds of MB must not grow the launcher or flood its report).
constexpr size_t kMaxErrorFileBytes = size_t{1} << 20;

struct ErrorRecord {
  std::string message;    // "<Type>: <msg>"
  std::string callstack;  // backtrace or context; may be empty
  long long timestamp = 0;  // unix seconds; 0 when absent
  std::optional<int> error_code;  // "errorCode" when present
  // extraInfo.follows_rank: this failure is a consequence of that rank's.
  std::optional<int> follows_rank;
};

// Writes `rec` to `path` atomically. Throws std::runtime_error naming the
// path on I/O failure.
void write_error_file(const std::string& path, const ErrorRecord& rec);

// Reads an error file. Returns nullopt when the file does not exist; returns a
// record whose message says what is wrong when the file is unreadable or not
// valid JSON, so a report always shows something honest. Never blocks and
// never reads more than kMaxErrorFileBytes, whatever a worker left there:
//  - anything but a regular file (a FIFO, which would block an open or a
//    read forever; a directory; a device such as /dev/zero) is refused,
//    naming what it is; checked before the open (so a device is never
//    opened) and again on the open fd (O_NONBLOCK), so a swap in between
//    cannot make it block;
//  - a symlink is followed: the worker runs as the launcher's user and may
//    keep its file elsewhere, and following it reveals nothing the worker
//    could not read itself; what it points to must be a regular file;
//  - a file larger than kMaxErrorFileBytes is not parsed (its JSON is cut):
//    the message gives its size and its first bytes;
//  - inside strings, bytes that are not UTF-8 (read as the text \xNN), raw
//    control characters and lone UTF-16 surrogate escapes (Python's
//    "\udce9" for the byte 0xe9 of a surrogateescape'd path: read as \xe9;
//    others as U+FFFD) do not make the whole file unreadable.
std::optional<ErrorRecord> read_error_file(const std::string& path);

}  // namespace ddp
