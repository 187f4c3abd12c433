#pragma once
// write_output_file: writes a result (--summary_json) to a path the user
// named, whatever is there. A regular file, or nothing yet, is replaced
// atomically (atomic_file.h). Anything else is written through and never
// replaced or removed: a device (/dev/null, a terminal), a FIFO, a symlink
// (/dev/stdout -> /proc/self/fd/1, or a user's latest.json -> run42.json),
// as a shell's `>` would, so `--summary_json /dev/stdout` prints the summary
// and `/dev/null` stays a device (as root, renaming over them replaced them
// for the whole machine). Called once, at the end of a run; never blocks:
//  - a FIFO is opened O_NONBLOCK: one nobody reads fails at once (ENXIO),
//    one whose reader stops reading fails after `reader_wait`;
//  - a regular file reached through a symlink is truncated and written in
//    place (the link is kept), except when it is this process's own stdout
//    or stderr (/dev/stdout with `> out.txt`): then the summary is appended
//    after what the process wrote there, which truncating would lose.
// A symlink is followed only as fs.protected_symlinks=1 would allow, also
// where the machine has it at 0: in a sticky, world-writable directory
// (/tmp), only a link that the caller or the directory's owner owns; a link
// another user planted there (to a root-only file) is refused, not written.
// Owns nothing; throws AtomicWriteError ("<step> '<file>': <why>").

#include "ddp/common/atomic_file.h"

#include <chrono>
#include <string>
#include <string_view>
#include <sys/stat.h>

namespace ddp {

enum class OutputWay {
  Replace,       // missing or a regular file (not a symlink): write_file_atomically
  WriteThrough,  // anything else that exists: opened and written, never replaced
};

// What write_output_file will do with `path` now (lstat: a symlink is not
// followed). Callers check the matching permission up front: the directory's
// for Replace, the path's own for WriteThrough.
OutputWay output_way(const std::string& path);

// The kernel's protected_symlinks rule for a link with `link`'s owner in a
// directory with `dir`'s mode and owner, followed by `follower` (an euid).
bool may_follow_link(const struct stat& link, const struct stat& dir, uid_t follower);

// "" when `path` is not a symlink, or one that may_follow_link allows; else
// why it is refused: "a symlink in the sticky, world-writable directory
// '/tmp' owned by uid 1000, neither yours nor the directory owner's (...)".
std::string planted_link_reason(const std::string& path);

void write_output_file(const std::string& path, std::string_view data, mode_t mode = 0644,
                       std::chrono::milliseconds reader_wait = std::chrono::seconds(5));

}  // namespace ddp
