#include "ddp/common/error_file.h"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace ddp {
namespace pt = boost::property_tree;

void write_error_file(const std::string& path, const ErrorRecord& rec) {
  pt::ptree extra;
  extra.put("py_callstack", rec.callstack);
  extra.put("timestamp", std::to_string(rec.timestamp));
  pt::ptree msg;
  msg.put("message", rec.message);
  msg.add_child("extraInfo", extra);
  if (rec.error_code) msg.put("errorCode", *rec.error_code);
  pt::ptree root;
  root.add_child("message", msg);

  std::ostringstream out;
  pt::write_json(out, root, /*pretty=*/false);
  const std::string body = out.str();

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::runtime_error("cannot write error file " + tmp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < body.size()) {
    ssize_t n = ::write(fd, body.data() + off, body.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write error file " + tmp + ": " + std::strerror(e));
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot move error file into place at " + path + ": " + std::strerror(e));
  }
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::nullopt;
    return ErrorRecord{"(error file " + path + " exists but cannot be read: " +
                           std::strerror(errno) + ")", "", 0, std::nullopt};
  }
  pt::ptree root;
  try {
    pt::read_json(in, root);
  } catch (const pt::json_parser_error& e) {
    return ErrorRecord{"(error file " + path + " is not valid JSON: " + e.message() + ")", "",
                       0, std::nullopt};
  }
  ErrorRecord rec;
  auto msg = root.get_child_optional("message");
  if (!msg) {
    rec.message = "(error file " + path + " has no \"message\" field)";
    return rec;
  }
  if (msg->empty()) {  // a plain string
    rec.message = msg->data();
    return rec;
  }
  rec.message = msg->get<std::string>("message", "");
  rec.callstack = msg->get<std::string>("extraInfo.py_callstack", "");
  try {
    rec.timestamp = std::stoll(msg->get<std::string>("extraInfo.timestamp", "0"));
  } catch (const std::exception&) {
    rec.timestamp = 0;
  }
  if (auto code = msg->get_optional<int>("errorCode")) rec.error_code = *code;
  return rec;
}

}  // namespace ddp
