#include "ddp/common/parse.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace ddp {

long long parse_int(const std::string& text, const std::string& what,
                    long long lo, long long hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (text.empty())
    throw std::invalid_argument(what + ": empty value, expected an integer in " + range);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || std::isspace(static_cast<unsigned char>(text[0])))
    throw std::invalid_argument(what + ": '" + text + "' is not an integer");
  if (errno == ERANGE || v < lo || v > hi)
    throw std::invalid_argument(what + ": " + text + " is out of range, expected " + range);
  return v;
}

std::optional<double> parse_finite_double(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    return std::nullopt;
  return v;
}

double parse_seconds(const std::string& text, const std::string& what) {
  const auto parsed = parse_finite_double(text);
  if (!parsed) throw std::invalid_argument(what + ": '" + text + "' is not a number of seconds");
  const double v = *parsed;
  if (v < 0)
    throw std::invalid_argument(what + ": " + text + " is negative, expected seconds >= 0");
  return v;
}

bool parse_bool(const std::string& text, const std::string& what) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off" || t.empty()) return false;
  throw std::invalid_argument(what + ": '" + text + "' is not a boolean; use 1/0, true/false, yes/no or on/off");
}

std::optional<std::string> get_env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

}  // namespace ddp
