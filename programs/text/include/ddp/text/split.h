#pragma once
// The deterministic train/test split of the WordNet synsets: a synset's key
// is "<letter>:<offset>" (letter n, v, a, r from the data file it came from,
// offset its 8 digits as written, e.g. "n:00001740"); it is in the test split
// iff FNV-1a 64 of the key's bytes is 0 modulo 10 (about 10%). The same rule
// is in the Python twin; both must agree on every synset. Pure functions.

#include <cstdint>
#include <string>
#include <string_view>

namespace ddp::text {

// FNV-1a, 64 bit (offset basis 14695981039346656037, prime 1099511628211).
std::uint64_t fnv1a_64(std::string_view bytes);
// "<letter>:<offset>".
std::string split_key(char letter, std::string_view offset);
// True when the synset with this key belongs to the test split.
bool is_test(std::string_view key);

}  // namespace ddp::text
