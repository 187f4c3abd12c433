#pragma once
// write_file_atomically: the one way this project replaces a file so that a
// reader (or a crash at any moment) sees either the old content or the new,
// never a mix. Used for checkpoints, weights files, the torchelastic error
// file, the rewritten metrics.jsonl and --summary_json (through
// output_file.h). Steps: a temp file in the same directory (rename is atomic
// only within one file system), write, fsync, rename over the target, fsync
// the directory (so the rename itself survives a power loss). On failure the
// temp file is removed and the target is left as it was. Owns nothing.
//
// The directory may be one other users can write (/tmp, a shared project
// directory), so the temp file is never a path that existed before: its name
// ends in 64 random bits, and it is created with O_CREAT | O_EXCL |
// O_NOFOLLOW, so a symlink or FIFO planted there in advance is never
// followed, opened or removed (a name that exists is drawn again, a few
// times at most).

#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace ddp {

// what(): "<step> '<file>': <strerror>", e.g. "creating temp file
// '/d/.x.tmp.12.3f9a...': Permission denied". Callers prefix what they were
// saving.
class AtomicWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Replaces `path` with `data` (mode for a newly created file; an existing
// file's mode is not kept). Throws AtomicWriteError.
void write_file_atomically(const std::string& path, std::string_view data, mode_t mode = 0644);

// How write_file_atomically names its temp files for `path` in this
// process: this prefix, "<dir>/.<name>.tmp.<pid>." (hidden, so directory
// listings skip it; the pid tells whose it was), then 16 random hex digits.
std::string atomic_temp_prefix(const std::string& path);

}  // namespace ddp
