#include "ddp/loop/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <stdexcept>
#include <unistd.h>

#include "ddp/common/atomic_file.h"
#include "ddp/common/fd_io.h"
#include "ddp/common/json_writer.h"

namespace ddp::loop {
namespace {

std::string num(double v) {
  if (!std::isfinite(v)) return "null";  // JSON has no NaN/Inf
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.8g", v);
  return buf;
}

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw std::runtime_error("cannot " + what + " metrics file '" + path + "': " + std::strerror(errno));
}

void write_all(int fd, const std::string& data, const std::string& path) {
  const ddp::fd::Moved m = ddp::fd::write_all(fd, data);
  if (m.bytes == data.size()) return;
  ::close(fd);
  errno = m.error != 0 ? m.error : EIO;
  io_error("write", path);
}

}  // namespace

std::string to_json_line(const EpochRecord& r) {
  ddp::json::Writer j(ddp::json::Ascii::utf8);
  j.object().key("epoch").integer(r.epoch).key("global_step").integer(r.global_step);
  j.key("train_loss").number(num(r.train_loss)).key("test_loss").number(num(r.test_loss));
  for (const auto& [name, value] : r.metrics) j.key(name).number(num(value));
  j.key("learning_rate").number(num(r.learning_rate));
  j.key("train_samples").integer(r.train_samples).key("eval_samples").integer(r.eval_samples);
  j.key("train_seconds").number(num(r.train_seconds)).key("samples_per_second").number(num(r.samples_per_second));
  j.key("world_size").integer(r.world_size).key("checkpoint").string(r.checkpoint).end();
  return j.text();
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
