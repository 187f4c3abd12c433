#pragma once
// inotify on one directory: waits, bounded, for the first file created there
// whose name contains a given part. Lets a case inject a fault at the moment
// a file appears (a checkpoint's temp file, a /dev/shm segment) instead of
// after a guessed delay.

#include <optional>
#include <string>

namespace ddp::test {

class CreateWatch {
 public:
  explicit CreateWatch(const std::string& dir);  // throws when inotify refuses
  ~CreateWatch();
  CreateWatch(const CreateWatch&) = delete;
  CreateWatch& operator=(const CreateWatch&) = delete;
  // The name of the first file created since construction (or the last
  // wait) that contains `part`; nullopt after timeout_s.
  std::optional<std::string> wait(const std::string& part, double timeout_s);

 private:
  int fd_ = -1;
};

}  // namespace ddp::test
