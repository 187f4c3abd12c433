#include "fashion_fixture.h"

#include <catch2/catch.hpp>
#include <zlib.h>

#include <filesystem>

#include "ddp/fashion/fashion_mnist.h"
#include "test_support.h"

namespace ddp::test {

std::vector<std::uint8_t> idx_bytes(std::uint8_t type, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> b = {0, 0, type, static_cast<std::uint8_t>(dims.size())};
  for (auto d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb1");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

bool have_fashion_data() {
  return std::filesystem::exists(std::string(ddp::fashion::kDefaultDataDir) + "/train-images-idx3-ubyte.gz");
}

namespace {

// The first n samples of one split, as `prefix`-images/-labels files in dir.
void write_head(const std::string& dir, const std::string& prefix, std::uint32_t n) {
  const auto all = ddp::fashion::load_split(ddp::fashion::kDefaultDataDir, prefix);
  REQUIRE(all.count >= n);
  const std::size_t pixels = static_cast<std::size_t>(n) * 28 * 28;
  write_gz(dir + "/" + prefix + "-images-idx3-ubyte.gz",
           idx_bytes(8, {n, 28, 28}, std::vector<std::uint8_t>(all.pixels.begin(), all.pixels.begin() + pixels)));
  write_gz(dir + "/" + prefix + "-labels-idx1-ubyte.gz",
           idx_bytes(8, {n}, std::vector<std::uint8_t>(all.labels.begin(), all.labels.begin() + n)));
}

}  // namespace

const std::string& small_fashion_dir() {
  REQUIRE(have_fashion_data());
  static TempDir dir;
  static const std::string path = [] {
    write_head(dir.path(), "train", kSmallTrain);
    write_head(dir.path(), "t10k", kSmallTest);
    return dir.path();
  }();
  return path;
}

}  // namespace ddp::test
