#pragma once
// A Store that forwards every request to a shared one and counts it: a
// multi_get or multi_set is one request, as on the wire. The rendezvous'
// in-process tests (test_rdzv_scale.cpp, test_rdzv_recovery.cpp) measure
// what a phase costs each node with it; it changes nothing it forwards.

#include <atomic>

#include "store.h"

namespace ddp::rdzv::testing {

class CountingStore final : public Store {
 public:
  explicit CountingStore(Store& inner) : inner_(inner) {}
  long long take() { return count_.exchange(0); }

  void set(const std::string& k, const std::string& v) override { ++count_, inner_.set(k, v); }
  std::string get(const std::string& k) override { return ++count_, inner_.get(k); }
  std::optional<std::string> try_get(const std::string& k) override { return ++count_, inner_.try_get(k); }
  long long add(const std::string& k, long long d) override { return ++count_, inner_.add(k, d); }
  bool check(const std::string& k) override { return ++count_, inner_.check(k); }
  std::string compare_set(const std::string& k, const std::string& e, const std::string& d) override {
    return ++count_, inner_.compare_set(k, e, d);
  }
  bool wait(const std::string& k, std::chrono::milliseconds t) override { return ++count_, inner_.wait(k, t); }
  std::vector<std::optional<std::string>> multi_get(const std::vector<std::string>& keys) override {
    return ++count_, inner_.multi_get(keys);
  }
  void multi_set(const std::vector<std::pair<std::string, std::string>>& entries) override {
    ++count_, inner_.multi_set(entries);
  }

 private:
  Store& inner_;
  std::atomic<long long> count_{0};
};

}  // namespace ddp::rdzv::testing
