#pragma once
// The checkpoint directory's lock: rank 0 of a training run holds an
// exclusive flock on <dir>/.ddp-loop.lock for the whole run, so two runs
// started together into one directory cannot both pass the fresh-run check
// and write over each other's epoch_<N>.pt and metrics.jsonl. The holder
// writes "pid <P> host <H>" into the file, and a second run fails at once
// with one line naming the directory and that holder. The kernel drops the
// lock when the holder exits, however it exits, so a restarted rank 0 (or a
// later run) takes it again; the file itself is left in place (removing it
// while another process opens it would let two holders lock two files).
// On NFS, flock works as a POSIX lock (Linux >= 2.6.12).

#include <string>

namespace ddp::loop {

class CheckpointDirLock {
 public:
  // Takes the lock of `dir` (which must exist) without waiting. Throws
  // std::runtime_error: "checkpoint directory 'D' is in use by another
  // training run (pid 123 on host h holds D/.ddp-loop.lock); wait for it
  // to finish or pass another --checkpoint_dir", or "checkpoint directory
  // 'D' is not writable (creating its lock file ...: <errno>); pass a
  // writable --checkpoint_dir" when the lock file cannot be opened.
  explicit CheckpointDirLock(const std::string& dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// The lock file of `dir`.
std::string checkpoint_lock_path(const std::string& dir);

// The host name this process reports as a lock holder or a launch's host.
std::string this_host();

}  // namespace ddp::loop
