// The IDX(.gz) reader and the Fashion-MNIST loader, on crafted files: good
// ones round-trip, every damaged one is a single-line DataError that names
// the file and the problem.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ddp/fashion/fashion_mnist.h"
#include "ddp/fashion/idx_file.h"
#include "fashion_fixture.h"
#include "test_support.h"
#include "test_skip.h"

using namespace ddp::fashion;
using ddp::test::TempDir;
using ddp::test::idx_bytes;
using ddp::test::write_gz;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::uint8_t> pixels(std::size_t n) {
  std::vector<std::uint8_t> p(n * 28 * 28);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>(i * 7);
  return p;
}

// A tiny but valid data directory with n train and m test samples.
void write_dataset(const std::string& dir, std::size_t n, std::size_t m) {
  auto labels = [](std::size_t k) {
    std::vector<std::uint8_t> l(k);
    for (std::size_t i = 0; i < k; ++i) l[i] = static_cast<std::uint8_t>(i % 10);
    return l;
  };
  write_gz(dir + "/train-images-idx3-ubyte.gz",
           idx_bytes(8, {static_cast<std::uint32_t>(n), 28, 28}, pixels(n)));
  write_gz(dir + "/train-labels-idx1-ubyte.gz", idx_bytes(8, {static_cast<std::uint32_t>(n)}, labels(n)));
  write_gz(dir + "/t10k-images-idx3-ubyte.gz",
           idx_bytes(8, {static_cast<std::uint32_t>(m), 28, 28}, pixels(m)));
  write_gz(dir + "/t10k-labels-idx1-ubyte.gz", idx_bytes(8, {static_cast<std::uint32_t>(m)}, labels(m)));
}

}  // namespace

TEST_CASE("read_idx reads a gzip'd IDX file", "[train][reader]") {
  TempDir tmp;
  const auto path = tmp.file("a.gz");
  write_gz(path, idx_bytes(8, {3, 2}, {1, 2, 3, 4, 5, 6}));
  IdxArray a = read_idx(path, 2);
  CHECK(a.dims == std::vector<std::size_t>{3, 2});
  CHECK(a.data == std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("read_idx names the file and the problem for damaged files", "[train][reader]") {
  TempDir tmp;
  const auto path = tmp.file("x-idx1-ubyte.gz");

  SECTION("missing") {
    const auto msg = error_of([&] { read_idx(path, 1); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("cannot open"));
  }
  SECTION("truncated data") {
    write_gz(path, idx_bytes(8, {10}, {1, 2, 3}));
    const auto msg = error_of([&] { read_idx(path, 1); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("truncated: 3 of 10 data bytes"));
  }
  SECTION("truncated gzip stream") {
    std::vector<std::uint8_t> big(50000);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
    write_gz(path, idx_bytes(8, {50000}, big));
    std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
    const auto msg = error_of([&] { read_idx(path, 1); });
    CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("truncated"));
  }
  SECTION("corrupt gzip stream") {
    std::vector<std::uint8_t> big(50000);
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>((i * 2654435761u) >> 13);
    write_gz(path, idx_bytes(8, {50000}, big));
    auto bytes = ddp::test::read_file(path);
    for (std::size_t i = 100; i < 400; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
    ddp::test::write_file(path, bytes);
    const auto msg = error_of([&] { read_idx(path, 1); });
    CHECK_THAT(msg, Catch::Contains(path) && (Catch::Contains("corrupt") || Catch::Contains("truncated")));
  }
  SECTION("bad magic") {
    write_gz(path, {1, 2, 3, 4, 0, 0, 0, 1, 9});
    CHECK_THAT(error_of([&] { read_idx(path, 1); }), Catch::Contains(path) && Catch::Contains("bad magic"));
  }
  SECTION("wrong element type") {
    write_gz(path, idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
    CHECK_THAT(error_of([&] { read_idx(path, 1); }), Catch::Contains("element type"));
  }
  SECTION("wrong rank") {
    write_gz(path, idx_bytes(8, {1, 1}, {0}));
    CHECK_THAT(error_of([&] { read_idx(path, 1); }), Catch::Contains("2 dimensions, expected 1"));
  }
  SECTION("header cut short") {
    write_gz(path, {0, 0, 8, 3, 0, 0});
    CHECK_THAT(error_of([&] { read_idx(path, 3); }), Catch::Contains("truncated inside its IDX header"));
  }
  SECTION("trailing garbage") {
    write_gz(path, idx_bytes(8, {2}, {1, 2, 3}));
    CHECK_THAT(error_of([&] { read_idx(path, 1); }), Catch::Contains("more data than its header"));
  }
  SECTION("every message is one line") {
    write_gz(path, idx_bytes(8, {10}, {1}));
    CHECK(error_of([&] { read_idx(path, 1); }).find('\n') == std::string::npos);
  }
}

TEST_CASE("load_fashion_mnist loads a crafted directory", "[train][reader]") {
  TempDir tmp;
  write_dataset(tmp.path(), 20, 7);
  FashionMnist d = load_fashion_mnist(tmp.path());
  CHECK(d.train.count == 20);
  CHECK(d.test.count == 7);
  CHECK(d.train.pixels.size() == 20 * 784);
  CHECK(d.test.labels == std::vector<std::uint8_t>{0, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("load_fashion_mnist explains a missing directory, file or a bad label", "[train][reader]") {
  TempDir tmp;
  SECTION("missing directory names the path and the package") {
    const auto dir = tmp.file("nope");
    const auto msg = error_of([&] { load_fashion_mnist(dir); });
    CHECK_THAT(msg, Catch::Contains("'" + dir + "'") &&
                        Catch::Contains("apt-get install dataset-fashion-mnist"));
  }
  SECTION("missing file") {
    write_dataset(tmp.path(), 4, 4);
    std::filesystem::remove(tmp.file("t10k-labels-idx1-ubyte.gz"));
    CHECK_THAT(error_of([&] { load_fashion_mnist(tmp.path()); }),
               Catch::Contains("t10k-labels-idx1-ubyte.gz' is missing"));
  }
  SECTION("label out of range") {
    write_dataset(tmp.path(), 4, 4);
    write_gz(tmp.file("train-labels-idx1-ubyte.gz"), idx_bytes(8, {4}, {0, 1, 12, 3}));
    CHECK_THAT(error_of([&] { load_fashion_mnist(tmp.path()); }),
               Catch::Contains("label 12 at index 2"));
  }
  SECTION("image and label counts differ") {
    write_dataset(tmp.path(), 4, 4);
    write_gz(tmp.file("train-labels-idx1-ubyte.gz"), idx_bytes(8, {3}, {0, 1, 2}));
    CHECK_THAT(error_of([&] { load_fashion_mnist(tmp.path()); }),
               Catch::Contains("4 images but") && Catch::Contains("3 labels"));
  }
  SECTION("wrong image size") {
    write_dataset(tmp.path(), 4, 4);
    write_gz(tmp.file("t10k-images-idx3-ubyte.gz"), idx_bytes(8, {4, 2, 2}, std::vector<std::uint8_t>(16)));
    CHECK_THAT(error_of([&] { load_fashion_mnist(tmp.path()); }), Catch::Contains("2x2 images, expected 28x28"));
  }
}

TEST_CASE("the installed Fashion-MNIST has 60000 + 10000 samples", "[train][reader][real-data]") {
  if (!std::filesystem::exists(std::string(kDefaultDataDir) + "/train-images-idx3-ubyte.gz")) {
    DDP_SKIP("dataset-fashion-mnist is not installed");
  }
  FashionMnist d = load_fashion_mnist(kDefaultDataDir);
  CHECK(d.train.count == 60000);
  CHECK(d.test.count == 10000);
  std::vector<int> per_class(10);
  for (auto l : d.test.labels) ++per_class[l];
  for (int c : per_class) CHECK(c == 1000);
}
