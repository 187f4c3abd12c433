#pragma once
// Fashion-MNIST files for the ddp-train tests: IDX(.gz) files written from
// bytes (the reader's crafted cases), and a small real data directory for
// the end-to-end cases whose subject is not the data.
#include <cstdint>
#include <string>
#include <vector>

#include "test_skip.h"

namespace ddp::test {

// An IDX file's bytes: magic (type, number of dimensions), the dimensions,
// then `data`.
std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& data);

// Writes `bytes` gzip'd to `path` (REQUIREs success).
void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes);

// Whether dataset-fashion-mnist is installed (kDefaultDataDir).
bool have_fashion_data();

// The first kSmallTrain training and kSmallTest test samples of the installed
// Fashion-MNIST, written once per test process into a directory that lives
// as long as the process: a --data_dir that a short run loads and evaluates
// in about a third of the whole set's time (2.9 -> 1.0 CPU s for 2 steps).
// Needs the dataset (a case checks first with DDP_REQUIRE_FASHION_DATA).
inline constexpr std::uint32_t kSmallTrain = 8192;
inline constexpr std::uint32_t kSmallTest = 1024;
const std::string& small_fashion_dir();

}  // namespace ddp::test

// In a test case: skips it when dataset-fashion-mnist is not installed.
#define DDP_REQUIRE_FASHION_DATA()                                                             \
  do {                                                                                         \
    if (!::ddp::test::have_fashion_data()) DDP_SKIP("dataset-fashion-mnist is not installed"); \
  } while (false)
