#pragma once
// A rendezvous store in this process's memory (store.h), for tests: the
// nodes of a test are threads that share one MemoryStore, as gloo's tests
// share a HashStore. Same answers as the store server (store_protocol.h);
// no wire, no port. Thread-safe. Tests that must not sleep wait for the
// next change (await_change) instead of polling on a timer.
#include "store.h"

#include <condition_variable>
#include <map>
#include <mutex>

namespace ddp::rdzv {

class MemoryStore final : public Store {
 public:
  // get() waits this long for a key, then throws StoreError (real time).
  explicit MemoryStore(std::chrono::milliseconds get_timeout = std::chrono::seconds(20));

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key) override;
  std::optional<std::string> try_get(const std::string& key) override;
  // Throws StoreError for a value that is not a number, as the server refuses it.
  long long add(const std::string& key, long long delta) override;
  bool check(const std::string& key) override;
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override;
  bool wait(const std::string& key, std::chrono::milliseconds timeout) override;
  // Under one lock, as the server answers them.
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::pair<std::string, std::string>>& entries) override;

  // How many requests have changed what the store holds so far (reads and
  // writes of the value a key already holds do not count).
  unsigned long long version() const;
  // Waits until version() differs from seen, at most timeout (real time);
  // returns version().
  unsigned long long await_change(unsigned long long seen, std::chrono::milliseconds timeout) const;

 private:
  void changed();  // with m_ held

  std::chrono::milliseconds get_timeout_;
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  std::map<std::string, std::string> values_;
  unsigned long long version_ = 0;
};

}  // namespace ddp::rdzv
