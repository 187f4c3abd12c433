// One number syntax for every option and variable: decimal digits with an
// optional sign, fraction and exponent; never hex, never spaces, never a
// word like inf (ddp/common/parse.h).
#include "ddp/common/parse.h"

#include <catch2/catch.hpp>

#include <stdexcept>

TEST_CASE("parse_int: decimal digits only, the whole string, in range") {
  CHECK(ddp::parse_int("2", "--n", 1, 10) == 2);
  CHECK(ddp::parse_int("+2", "--n", 1, 10) == 2);
  CHECK(ddp::parse_int("010", "--n", 1, 10) == 10);  // decimal, as Python's int("010"); never octal 8
  CHECK(ddp::parse_int("-3", "--n", -5, 10) == -3);
  for (const std::string bad : {"0x2", "0X2", " 2", "2 ", "\t2", "1_000", "2.0", "1e3", "", "+", "-", "٣"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(ddp::parse_int(bad, "--n", 0, 1 << 20), std::invalid_argument);
  }
  CHECK_THROWS_WITH(ddp::parse_int("0x2", "--n", 0, 10), "--n: '0x2' is not an integer");
}

TEST_CASE("parse_finite_double: decimal with an optional fraction and exponent, nothing else") {
  for (const auto& [text, value] : std::vector<std::pair<std::string, double>>{
           {"1", 1}, {"1.5", 1.5}, {".5", 0.5}, {"5.", 5}, {"1e3", 1000}, {"1E-3", 0.001}, {"+2", 2}, {"-2.5", -2.5},
           {"010", 10}, {"0.25e+1", 2.5}}) {
    INFO("'" << text << "'");
    REQUIRE(ddp::parse_finite_double(text));
    CHECK(*ddp::parse_finite_double(text) == value);
  }
  for (const std::string bad : {"0x10", "0X10", "0x1p3", " 1", "1 ", "\n1", "inf", "-inf", "nan", "infinity", "1e",
                                "1e+", ".", "", "+", "1.2.3", "1,5", "1_0", "e3", "1e400"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(ddp::parse_finite_double(bad));
  }
  CHECK_THROWS_WITH(ddp::parse_seconds("0x10", "--shutdown_timeout"), "--shutdown_timeout: '0x10' is not a number of seconds");
}
