#include "ddp/fashion/idx_file.h"

#include <cerrno>
#include <cstring>
#include <limits>
#include <zlib.h>

namespace ddp::fashion {
namespace {

// Owns a gzFile so every error path closes it.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) {
      const int err = errno;
      throw DataError("cannot open '" + path + "': " +
                      (err ? std::strerror(err) : "out of memory"));
    }
    gzbuffer(file_, 1 << 16);
  }
  ~GzReader() {
    if (file_) gzclose(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; returns how many arrived (fewer only at the end of
  // the data). A damaged stream throws, naming zlib's reason.
  std::size_t read(void* buf, std::size_t n) {
    auto* out = static_cast<unsigned char*>(buf);
    std::size_t got = 0;
    while (got < n) {
      const std::size_t chunk = std::min<std::size_t>(n - got, 1u << 30);
      const int r = gzread(file_, out + got, static_cast<unsigned>(chunk));
      if (r < 0) fail();
      if (r == 0) {
        // gzread reports a cut-off gzip stream as end of data plus an error.
        int code = Z_OK;
        const char* msg = gzerror(file_, &code);
        if (code != Z_OK && code != Z_STREAM_END)
          throw DataError("'" + path_ + "' is truncated or corrupt (" + msg +
                          "); reinstall it with `apt-get install --reinstall dataset-fashion-mnist`");
        break;
      }
      got += static_cast<std::size_t>(r);
    }
    return got;
  }

 private:
  [[noreturn]] void fail() {
    int code = Z_OK;
    const char* msg = gzerror(file_, &code);
    throw DataError("'" + path_ + "' is corrupt (" + std::string(msg ? msg : "zlib error") +
                    "); reinstall it with `apt-get install --reinstall dataset-fashion-mnist`");
  }

  std::string path_;
  gzFile file_ = nullptr;
};

std::uint32_t big_endian_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
         (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

}  // namespace

IdxArray read_idx(const std::string& path, std::size_t expected_rank) {
  GzReader in(path);
  const std::string reinstall =
      "; reinstall it with `apt-get install --reinstall dataset-fashion-mnist`";

  unsigned char magic[4];
  if (in.read(magic, 4) != 4)
    throw DataError("'" + path + "' is truncated: shorter than the 4-byte IDX header" + reinstall);
  if (magic[0] != 0 || magic[1] != 0)
    throw DataError("'" + path + "' is not an IDX file (bad magic number)" + reinstall);
  if (magic[2] != 0x08)
    throw DataError("'" + path + "' has IDX element type 0x" +
                    std::to_string(static_cast<int>(magic[2])) +
                    ", expected unsigned bytes (0x08)" + reinstall);
  if (magic[3] != expected_rank)
    throw DataError("'" + path + "' has " + std::to_string(static_cast<int>(magic[3])) +
                    " dimensions, expected " + std::to_string(expected_rank) + reinstall);

  IdxArray out;
  std::size_t total = 1;
  for (std::size_t i = 0; i < expected_rank; ++i) {
    unsigned char b[4];
    if (in.read(b, 4) != 4)
      throw DataError("'" + path + "' is truncated inside its IDX header" + reinstall);
    const std::size_t d = big_endian_u32(b);
    // Fashion-MNIST's largest file holds 47 MB; anything beyond 4 GiB is a
    // damaged header, and refusing it avoids a huge allocation.
    if (d == 0 || total > (std::size_t{1} << 32) / d)
      throw DataError("'" + path + "' has an implausible dimension size " + std::to_string(d) +
                      reinstall);
    total *= d;
    out.dims.push_back(d);
  }

  out.data.resize(total);
  const std::size_t got = in.read(out.data.data(), total);
  if (got != total)
    throw DataError("'" + path + "' is truncated: " + std::to_string(got) + " of " +
                    std::to_string(total) + " data bytes" + reinstall);
  unsigned char extra;
  if (in.read(&extra, 1) != 0)
    throw DataError("'" + path + "' is corrupt: more data than its header declares" + reinstall);
  return out;
}

}  // namespace ddp::fashion
