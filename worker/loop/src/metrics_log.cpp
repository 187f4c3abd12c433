#include "ddp/loop/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

#include "ddp/common/atomic_file.h"

namespace ddp::loop {
namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/Inf
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw std::runtime_error("cannot " + what + " metrics file '" + path + "': " + std::strerror(errno));
}

void write_all(int fd, const std::string& data, const std::string& path) {
  std::size_t off = 0;
  while (off < data.size()) {
    const ssize_t w = ::write(fd, data.data() + off, data.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      errno = e;
      io_error("write", path);
    }
    off += static_cast<std::size_t>(w);
  }
}

}  // namespace

std::string to_json_line(const EpochRecord& r) {
  std::ostringstream o;
  o << "{\"epoch\": " << r.epoch << ", \"global_step\": " << r.global_step
    << ", \"train_loss\": " << num(r.train_loss) << ", \"test_loss\": " << num(r.test_loss);
  for (const auto& [name, value] : r.metrics) o << ", " << quoted(name) << ": " << num(value);
  o << ", \"learning_rate\": " << num(r.learning_rate)
    << ", \"train_samples\": " << r.train_samples << ", \"eval_samples\": " << r.eval_samples
    << ", \"train_seconds\": " << num(r.train_seconds)
    << ", \"samples_per_second\": " << num(r.samples_per_second)
    << ", \"world_size\": " << r.world_size << ", \"checkpoint\": " << quoted(r.checkpoint) << "}";
  return o.str();
}

void append_metrics(const std::string& path, const EpochRecord& r) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) io_error("open", path);
  write_all(fd, to_json_line(r) + "\n", path);
  ::fsync(fd);
  ::close(fd);
}

namespace {

int epoch_of(const std::string& line) {
  const auto k = line.find("\"epoch\":");
  return k == std::string::npos ? -1 : std::atoi(line.c_str() + k + 8);
}

}  // namespace

bool restore_metrics_line(const std::string& path, int epoch, const std::string& line) {
  std::ifstream in(path);
  for (std::string l; in && std::getline(in, l);)
    if (epoch_of(l) == epoch) return false;
  in.close();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) io_error("open", path);
  write_all(fd, line + "\n", path);
  ::fsync(fd);
  ::close(fd);
  return true;
}

void truncate_metrics_after(const std::string& path, int last_epoch) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  bool dropped = false;
  while (std::getline(in, line)) {
    if (epoch_of(line) > last_epoch) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
  }
  if (!dropped) return;
  try {
    ddp::write_file_atomically(path, kept);
  } catch (const ddp::AtomicWriteError& e) {
    throw std::runtime_error("cannot rewrite metrics file '" + path + "': " + e.what());
  }
}

}  // namespace ddp::loop
