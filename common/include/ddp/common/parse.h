#pragma once
// Strict parsing of the numbers and flags that arrive as strings from the
// command line or the environment. Owns nothing; throws std::invalid_argument
// with a message that names the value and the field ("--nnodes: '0x' is not
// an integer"), so callers can print it as the single line of a usage error.
// One number syntax for every option and variable: decimal digits with an
// optional sign (reals: also a fraction and an exponent, "1.5", ".5", "1e-3");
// no hex ("0x10"), no spaces, no inf/nan. Leading zeros are decimal ("010" is
// 10, as Python's int() reads it).

#include <cstdint>
#include <optional>
#include <string>

namespace ddp {

// Whole-string base-10 integer in [lo, hi]; `what` names the option or
// variable in the message.
long long parse_int(const std::string& text, const std::string& what,
                    long long lo, long long hi);

// The whole string as a finite double, or nullopt (empty, trailing text,
// overflow, inf, nan). Callers word the error for their own field.
std::optional<double> parse_finite_double(const std::string& text);

// Non-negative seconds, fractions allowed ("0.5").
double parse_seconds(const std::string& text, const std::string& what);

// Truthy/falsy spellings used by PET_* flags and Python: 1/0, true/false,
// yes/no, on/off (case-insensitive).
bool parse_bool(const std::string& text, const std::string& what);

// getenv that returns nullopt for unset (empty counts as set).
std::optional<std::string> get_env(const char* name);

}  // namespace ddp
