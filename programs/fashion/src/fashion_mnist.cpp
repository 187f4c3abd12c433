#include "ddp/fashion/fashion_mnist.h"

#include <filesystem>

#include "ddp/fashion/idx_file.h"

namespace ddp::fashion {
namespace fs = std::filesystem;

namespace {

const char* kInstallHint =
    "install it with `apt-get install dataset-fashion-mnist` or pass --data_dir";

std::string require_file(const std::string& dir, const std::string& name) {
  const std::string path = (fs::path(dir) / name).string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw DataError("Fashion-MNIST file '" + path + "' is missing; " + kInstallHint);
  return path;
}

}  // namespace

LabeledImages load_split(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw DataError("Fashion-MNIST directory '" + dir + "' does not exist; " + kInstallHint);

  const std::string images_path = require_file(dir, prefix + "-images-idx3-ubyte.gz");
  const std::string labels_path = require_file(dir, prefix + "-labels-idx1-ubyte.gz");
  IdxArray images = read_idx(images_path, 3);
  IdxArray labels = read_idx(labels_path, 1);

  if (images.dims[1] != kImageSide || images.dims[2] != kImageSide)
    throw DataError("'" + images_path + "' holds " + std::to_string(images.dims[1]) + "x" +
                    std::to_string(images.dims[2]) + " images, expected 28x28");
  if (images.dims[0] != labels.dims[0])
    throw DataError("'" + images_path + "' has " + std::to_string(images.dims[0]) +
                    " images but '" + labels_path + "' has " + std::to_string(labels.dims[0]) +
                    " labels");
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses)
      throw DataError("'" + labels_path + "' is corrupt: label " +
                      std::to_string(static_cast<int>(labels.data[i])) + " at index " +
                      std::to_string(i) + " is not a class 0..9");
  }

  LabeledImages out;
  out.count = images.dims[0];
  out.pixels = std::move(images.data);
  out.labels = std::move(labels.data);
  return out;
}

FashionMnist load_fashion_mnist(const std::string& dir) {
  FashionMnist d;
  d.train = load_split(dir, "train");
  d.test = load_split(dir, "t10k");
  return d;
}

}  // namespace ddp::fashion
