#pragma once
// Fashion-MNIST as Debian's dataset-fashion-mnist package installs it: the
// four `*-idx?-ubyte.gz` files in one directory. Keeps pixels as bytes
// (47 MB for the training set instead of 188 MB as floats); the trainer
// converts one batch at a time. Throws DataError (one line, names the path
// and what to do) on a missing directory or file and on damaged content.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::fashion {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kImageSide = 28;
inline constexpr int kNumClasses = 10;

struct LabeledImages {
  std::size_t count = 0;
  std::vector<std::uint8_t> pixels;  // count * 28 * 28
  std::vector<std::uint8_t> labels;  // count, each < 10
};

struct FashionMnist {
  LabeledImages train;
  LabeledImages test;
};

// Loads one split: `prefix` is "train" or "t10k".
LabeledImages load_split(const std::string& dir, const std::string& prefix);

// Loads both splits from `dir`.
FashionMnist load_fashion_mnist(const std::string& dir);

}  // namespace ddp::fashion
