#include "ddp/common/parse.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace ddp {

namespace {

bool digit(char c) { return c >= '0' && c <= '9'; }

// The one number syntax: [+-]digits, and for reals also .digits and
// [eE][+-]digits. strtoll/strtod alone also take leading spaces, and strtod
// hex ("0x10" is 16), "inf" and "nan": none of that is a number here.
bool decimal(const std::string& t, bool real) {
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  size_t digits = 0;
  while (i < t.size() && digit(t[i])) ++i, ++digits;
  if (real && i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && digit(t[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (real && i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    size_t exp = 0;
    while (i < t.size() && digit(t[i])) ++i, ++exp;
    if (exp == 0) return false;
  }
  return i == t.size();
}

}  // namespace

long long parse_int(const std::string& text, const std::string& what,
                    long long lo, long long hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (text.empty())
    throw std::invalid_argument(what + ": empty value, expected an integer in " + range);
  if (!decimal(text, false)) throw std::invalid_argument(what + ": '" + text + "' is not an integer");
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno == ERANGE || v < lo || v > hi)
    throw std::invalid_argument(what + ": " + text + " is out of range, expected " + range);
  return v;
}

std::optional<double> parse_finite_double(const std::string& text) {
  if (!decimal(text, true)) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
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
