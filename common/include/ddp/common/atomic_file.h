#pragma once
// write_file_atomically: the one way this project replaces a file so that a
// reader (or a crash at any moment) sees either the old content or the new,
// never a mix. Used for checkpoints, weights files, the torchelastic error
// file and the rewritten metrics.jsonl. Steps: a temp file in the same
// directory (rename is atomic only within one file system), write, fsync,
// rename over the target, fsync the directory (so the rename itself survives
// a power loss). On failure the temp file is removed and the target is left
// as it was. Owns nothing; never retries.

#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/types.h>

namespace ddp {

// what(): "<step> '<file>': <strerror>", e.g. "creating temp file
// '/d/.x.tmp.12': Permission denied". Callers prefix what they were saving.
class AtomicWriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Replaces `path` with `data` (mode for a newly created file; an existing
// file's mode is not kept). Throws AtomicWriteError.
void write_file_atomically(const std::string& path, std::string_view data, mode_t mode = 0644);

// The temp file write_file_atomically uses for `path` in this process:
// "<dir>/.<name>.tmp.<pid>" (hidden, so directory listings skip it).
std::string atomic_temp_path(const std::string& path);

}  // namespace ddp
