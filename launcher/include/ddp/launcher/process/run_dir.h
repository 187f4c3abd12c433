#pragma once
// The launcher's private run directory ($TMPDIR/ddp-launch-XXXXXX, mode 0700,
// so other users can neither read nor plant error files) holding each
// worker's TORCHELASTIC_ERROR_FILE as attempt_<n>.rank_<local_rank>.error.json
// (heartbeat pages are sealed memfds, never files: watch/progress_watch.h).
// Flat, because the directory is made and removed on every launch and each
// extra folder cost a visible part of the launch time. Removed with
// everything in it when the launcher exits, unless keep() was called: the
// failure report names error files in it, which must outlive the launcher.
// (With --log_dir the error files live there instead; see log_dir.h.)

#include <string>
#include <vector>

namespace ddp::launcher {

class RunDirectory {
 public:
  // Picks a fresh name under $TMPDIR (or /tmp) and creates nothing yet, so
  // the watchdog can be started with the name first: a launcher SIGKILLed
  // between creating the directory and starting its watchdog would leave it.
  RunDirectory();
  // Creates the directory (mode 0700). Throws std::runtime_error naming it;
  // the caller must then tell the watchdog to leave that name alone.
  void create();
  ~RunDirectory();
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;

  const std::string& path() const { return path_; }
  // The file's path (the file itself is the worker's to write).
  std::string error_file(int attempt, int local_rank);
  // Leave the directory and its files in place at exit.
  void keep() { keep_ = true; }
  // Removes it now, as the destructor would (nothing when kept): at a run's
  // end, while the watchdog (which removes it too) exits.
  void remove();
  bool kept() const { return keep_; }

 private:
  std::string path_;
  std::vector<std::string> handed_out_;
  bool keep_ = false;
  bool created_ = false;
};

}  // namespace ddp::launcher
