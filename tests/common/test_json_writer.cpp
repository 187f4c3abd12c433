// The one JSON writer (json_writer.h): strings as Python's json.dumps writes
// them, and the layouts the summary, the event log and the trace use.
#include <catch2/catch.hpp>

#include "ddp/common/json_writer.h"

#include <stdexcept>

using ddp::json::Ascii;
using ddp::json::quoted;
using ddp::json::Writer;

TEST_CASE("json strings: the escapes Python's json.dumps writes, in both modes") {
  for (const Ascii mode : {Ascii::ensure, Ascii::utf8}) {
    CHECK(quoted("a\"b\\c\n\t\x01", mode) == R"("a\"b\\c\n\t\u0001")");
    CHECK(quoted("\r\b\f\x1f", mode) == R"("\r\b\f\u001f")");
    CHECK(quoted(std::string("nul\0x", 5), mode) == R"("nul\u0000x")");
    CHECK(quoted("", mode) == R"("")");
  }
}

TEST_CASE("json strings, ensure_ascii: non-ASCII as escapes (u+4 hex digits), above U+FFFF as a surrogate pair, bad bytes as U+FFFD") {
  CHECK(quoted("caf\xc3\xa9") == R"("caf\u00e9")");          // json.dumps("café")
  CHECK(quoted("\xe2\x82\xac") == R"("\u20ac")");            // "€"
  CHECK(quoted("\xf0\x9f\x98\x80") == R"("\ud83d\ude00")");  // "😀"
  CHECK(quoted("\x7f") == R"("\u007f")");                    // DEL is not printable ASCII to Python
  CHECK(quoted("a\xff" "b") == R"("a\ufffdb")");
  CHECK(quoted("\xc3") == R"("\ufffd")");                    // cut short
  CHECK(quoted("\xc3(") == R"("\ufffd(")");                  // not a continuation byte
}

TEST_CASE("json strings, utf8: the bytes pass as they are (ensure_ascii=False)") {
  CHECK(quoted("caf\xc3\xa9 \x7f \xff", Ascii::utf8) == "\"caf\xc3\xa9 \x7f \xff\"");
}

TEST_CASE("json writer: json.dumps' separators by default, compact and line layouts on request") {
  Writer w;
  w.object().key("a").integer(1).key("b").array().integer(2).string("x").null().end();
  w.key("c").boolean(true).key("d").string_or_null("").key("e").number("1.500");
  w.key("f").integer_or_null(std::optional<int>{}).key("g").object().end().key("h").array().end().end();
  CHECK(w.text() == R"({"a": 1, "b": [2, "x", null], "c": true, "d": null, "e": 1.500, "f": null, "g": {}, "h": []})");

  Writer c(Ascii::ensure, ddp::json::kCompact);
  c.object().key("k").object().key("x").integer(-3).end().key("l").array({",", ":", "\n", "\n"}).integer(1).integer(2).end();
  c.key("m").array({",", ":", "\n", "\n"}).end().end();
  CHECK(c.text() == "{\"k\":{\"x\":-3},\"l\":[\n1,\n2\n],\"m\":[]}");
}

TEST_CASE("json writer: members for someone else's object, and raw JSON as one item") {
  Writer m = Writer::members();
  m.key("s").object().key("n").number("0.25").end();
  CHECK(m.text() == R"("s": {"n": 0.25})");

  Writer w;
  w.object().key("a").integer(1).raw(m.text()).raw("").key("b").raw("[1]").end();
  CHECK(w.text() == R"({"a": 1, "s": {"n": 0.25}, "b": [1]})");
}

TEST_CASE("json writer: misuse is the program's bug and throws") {
  Writer w;
  w.object();
  CHECK_THROWS_AS(w.integer(1), std::logic_error);  // a value where a key is due
  Writer a;
  a.array();
  CHECK_THROWS_AS(a.key("k"), std::logic_error);
  Writer e;
  CHECK_THROWS_AS(e.end(), std::logic_error);
  Writer k;
  k.object().key("k");
  CHECK_THROWS_AS(k.end(), std::logic_error);  // the key's value is missing
}
