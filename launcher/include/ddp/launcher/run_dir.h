#pragma once
// The launcher's private run directory ($TMPDIR/ddp-launch-XXXXXX, mode 0700,
// so other users can neither read nor plant error files) holding each
// worker's TORCHELASTIC_ERROR_FILE as attempt_<n>/<local_rank>/error.json.
// Removed with everything in it when the launcher exits.

#include <string>

namespace ddp::launcher {

class RunDirectory {
 public:
  RunDirectory();  // throws std::runtime_error naming the directory
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return path_; }
  // Creates the folder and returns the file's path (the file itself is the
  // worker's to write).
  std::string error_file(int attempt, int local_rank) const;

 private:
  std::string path_;
};

}  // namespace ddp::launcher
