#pragma once
// Reads one IDX file (the MNIST / Fashion-MNIST container: big-endian magic,
// dimension sizes, then raw unsigned bytes), gzip-compressed or plain, via
// zlib. Owns nothing after returning. Never prints; every problem is a
// DataError whose message is one line naming the file and what is wrong, so
// `main` can print it as is.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::fashion {

// A data problem the user can fix (missing package, wrong --data_dir,
// damaged file). Its message is the single line shown to the user.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct IdxArray {
  std::vector<std::size_t> dims;  // e.g. {60000, 28, 28}
  std::vector<std::uint8_t> data; // product(dims) bytes, row-major
};

// Reads `path`; `expected_rank` is 3 for images, 1 for labels. Only the
// unsigned-byte element type (0x08) is accepted, since that is all the
// Fashion-MNIST files use. Throws DataError on a missing, truncated, corrupt
// or oversized file.
IdxArray read_idx(const std::string& path, std::size_t expected_rank);

}  // namespace ddp::fashion
