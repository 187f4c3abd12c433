// untrusted_text.h: which bytes are valid UTF-8 (RFC 3629's strict form) and
// how the others are written (\xNN, as Python's backslashreplace).
#include <catch2/catch.hpp>

#include "ddp/common/untrusted_text.h"

using ddp::valid_utf8;

TEST_CASE("valid_utf8: valid text is unchanged, every other byte becomes a hex escape", "[untrusted_text]") {
  CHECK(valid_utf8("plain ascii, tab\t, newline\n") == "plain ascii, tab\t, newline\n");
  CHECK(valid_utf8("caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf") ==
        "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf");
  CHECK(valid_utf8(std::string("a\0b", 3)) == std::string("a\0b", 3));  // valid UTF-8; visible_text shows it
  CHECK(valid_utf8("caf\xe9") == "caf\\xe9");                           // Latin-1
  CHECK(valid_utf8("\xff\xfe") == "\\xff\\xfe");
  CHECK(valid_utf8("\xc0\x80") == "\\xc0\\x80");                        // overlong NUL
  CHECK(valid_utf8("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");               // overlong '/'
  CHECK(valid_utf8("\xed\xa0\x80") == "\\xed\\xa0\\x80");               // a surrogate, U+D800
  CHECK(valid_utf8("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");       // past U+10FFFF
  CHECK(valid_utf8("cut \xe2\x9c") == "cut \\xe2\\x9c");                 // a sequence cut at the end
  CHECK(valid_utf8("\xe2\x9c!") == "\\xe2\\x9c!");
  CHECK(valid_utf8("\x80 alone") == "\\x80 alone");
  CHECK(valid_utf8("a\\x41 stays") == "a\\x41 stays");  // a backslash is not doubled
}

TEST_CASE("utf8_sequence_length: the lengths, 0 where no valid sequence starts", "[untrusted_text]") {
  CHECK(ddp::utf8_sequence_length("a", 0) == 1);
  CHECK(ddp::utf8_sequence_length("\xc3\xa9", 0) == 2);
  CHECK(ddp::utf8_sequence_length("\xe2\x9c\x93", 0) == 3);
  CHECK(ddp::utf8_sequence_length("\xf0\x9f\x98\x80", 0) == 4);
  CHECK(ddp::utf8_sequence_length("\xc3\xa9", 1) == 0);
  CHECK(ddp::utf8_sequence_length("\xc1\xbf", 0) == 0);
  CHECK(ddp::utf8_sequence_length("\xf5\x80\x80\x80", 0) == 0);
}

TEST_CASE("visible_text: control characters and invalid UTF-8 as hex escapes, tabs and printable UTF-8 kept", "[untrusted_text]") {
  using ddp::Newlines;
  using ddp::visible_text;
  using namespace std::string_literals;
  CHECK(visible_text("tab\there caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80") == "tab\there caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80");
  CHECK(visible_text("nul\0cut"s) == "nul\\x00cut");
  CHECK(visible_text("\x1b[2Jclear \x07\x08\x7f\r") == "\\x1b[2Jclear \\x07\\x08\\x7f\\x0d");
  CHECK(visible_text("\xff caf\xe9") == "\\xff caf\\xe9");
  CHECK(visible_text("c1 \xc2\x9b" "2J, nbsp \xc2\xa0") == "c1 \\xc2\\x9b2J, nbsp \xc2\xa0");  // U+009B CSI quoted, U+00A0 kept
  CHECK(visible_text("two\nlines") == "two\\x0alines");
  CHECK(visible_text("two\nlines\r\n", Newlines::Keep) == "two\nlines\\x0d\n");
  CHECK(visible_text("already \\x00 quoted") == "already \\x00 quoted");  // idempotent on its own output
  CHECK(visible_text(visible_text("a\0b\xff"s)) == visible_text("a\0b\xff"s));
}
