#include "memory_store.h"

#include <cerrno>
#include <cstdlib>

namespace ddp::rdzv {

MemoryStore::MemoryStore(std::chrono::milliseconds get_timeout) : get_timeout_(get_timeout) {}

void MemoryStore::changed() {
  ++version_;
  cv_.notify_all();
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> l(m_);
  if (const auto it = values_.find(key); it != values_.end() && it->second == value) return;
  values_[key] = value;
  changed();
}

std::string MemoryStore::get(const std::string& key) {
  std::unique_lock<std::mutex> l(m_);
  if (!cv_.wait_for(l, get_timeout_, [&] { return values_.count(key) > 0; }))
    throw StoreError("memory store: key '" + key + "' was not set within the get timeout");
  return values_.at(key);
}

std::optional<std::string> MemoryStore::try_get(const std::string& key) {
  std::lock_guard<std::mutex> l(m_);
  const auto it = values_.find(key);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

long long MemoryStore::add(const std::string& key, long long delta) {
  std::lock_guard<std::mutex> l(m_);
  long long now = 0;
  if (const auto it = values_.find(key); it != values_.end()) {
    char* end = nullptr;
    errno = 0;
    now = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || errno == ERANGE)
      throw StoreRefused("memory store: add to key '" + key + "', whose value is not a number: '" + it->second + "'");
  }
  // A missing key is created, as the server does; a read of a present one changes nothing.
  if (delta == 0 && values_.count(key)) return now;
  now += delta;
  values_[key] = std::to_string(now);
  changed();
  return now;
}

bool MemoryStore::check(const std::string& key) {
  std::lock_guard<std::mutex> l(m_);
  return values_.count(key) > 0;
}

std::string MemoryStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  std::lock_guard<std::mutex> l(m_);
  const auto it = values_.find(key);
  if ((it == values_.end() && expected.empty()) || (it != values_.end() && it->second == expected)) {
    if (it == values_.end() || it->second != desired) {
      values_[key] = desired;
      changed();
    }
    return desired;
  }
  return it == values_.end() ? "" : it->second;
}

bool MemoryStore::wait(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(m_);
  return cv_.wait_for(l, timeout, [&] { return values_.count(key) > 0; });
}

std::vector<std::optional<std::string>> MemoryStore::multi_get(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> l(m_);
  std::vector<std::optional<std::string>> out;
  for (const auto& k : keys)
    if (const auto it = values_.find(k); it != values_.end()) out.emplace_back(it->second);
    else out.emplace_back(std::nullopt);
  return out;
}

void MemoryStore::multi_set(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::lock_guard<std::mutex> l(m_);
  bool any = false;
  for (const auto& [k, v] : entries) {
    if (const auto it = values_.find(k); it != values_.end() && it->second == v) continue;
    values_[k] = v;
    any = true;
  }
  if (any) changed();
}

unsigned long long MemoryStore::version() const {
  std::lock_guard<std::mutex> l(m_);
  return version_;
}

unsigned long long MemoryStore::await_change(unsigned long long seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(m_);
  cv_.wait_for(l, timeout, [&] { return version_ != seen; });
  return version_;
}

}  // namespace ddp::rdzv
