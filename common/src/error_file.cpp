#include "ddp/common/error_file.h"

#include "ddp/common/atomic_file.h"

#include <boost/property_tree/json_parser.hpp>
#include <boost/property_tree/ptree.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace ddp {
namespace pt = boost::property_tree;

namespace {

// Boost's JSON parser recurses once per '[' or '{': 100000 of them overflow
// the stack (found by tests/fuzz/fuzz_error_file). torchelastic's format
// nests 3 deep; anything past this is not an error file.
constexpr int kMaxJsonDepth = 64;

bool nested_deeper_than(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // skip the escaped character
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

void write_error_file(const std::string& path, const ErrorRecord& rec) {
  pt::ptree extra;
  extra.put("py_callstack", rec.callstack);
  extra.put("timestamp", std::to_string(rec.timestamp));
  if (rec.follows_rank) extra.put("follows_rank", std::to_string(*rec.follows_rank));
  pt::ptree msg;
  msg.put("message", rec.message);
  msg.add_child("extraInfo", extra);
  if (rec.error_code) msg.put("errorCode", *rec.error_code);
  pt::ptree root;
  root.add_child("message", msg);

  std::ostringstream out;
  pt::write_json(out, root, /*pretty=*/false);
  try {
    write_file_atomically(path, out.str(), 0600);
  } catch (const AtomicWriteError& e) {
    throw std::runtime_error("cannot write error file " + path + ": " + e.what());
  }
}

std::optional<ErrorRecord> read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::nullopt;
    return ErrorRecord{"(error file " + path + " exists but cannot be read: " +
                           std::strerror(errno) + ")", "", 0, std::nullopt, std::nullopt};
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (nested_deeper_than(text, kMaxJsonDepth))
    return ErrorRecord{"(error file " + path + " is not a torchelastic error file: JSON nested deeper than " +
                           std::to_string(kMaxJsonDepth) + " levels)", "", 0, std::nullopt};
  pt::ptree root;
  try {
    std::istringstream json(text);
    pt::read_json(json, root);
  } catch (const pt::json_parser_error& e) {
    return ErrorRecord{"(error file " + path + " is not valid JSON: " + e.message() + ")", "",
                       0, std::nullopt, std::nullopt};
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
  if (auto follows = msg->get_optional<int>("extraInfo.follows_rank")) rec.follows_rank = *follows;
  return rec;
}

}  // namespace ddp
