#include "ddp/text/split.h"

namespace ddp::text {

std::uint64_t fnv1a_64(std::string_view bytes) {
  std::uint64_t h = 14695981039346656037ULL;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

std::string split_key(char letter, std::string_view offset) {
  std::string key(1, letter);
  key += ':';
  key += offset;
  return key;
}

bool is_test(std::string_view key) { return fnv1a_64(key) % 10 == 0; }

}  // namespace ddp::text
