// train.csv / test.csv: the writer's quoting, a round trip through the
// reader, Python's csv module reading the same fields, and one line for each
// damaged file.
#include <catch2/catch.hpp>

#include <filesystem>

#include "ddp/text/csv.h"
#include "ddp/text/lexnames.h"
#include "test_skip.h"
#include "test_support.h"
#include "text_test_files.h"

using namespace ddp::text;
using ddp::test::TempDir;
using ddp::test::write_file;
using ddp::text::test::text_error_of;

namespace {

// Texts that need every kind of quoting, and some that need none.
const std::vector<std::string>& tricky_texts() {
  static const std::vector<std::string> texts = {
      "plain text",
      "a, b, and c",
      "say \"hi\"",
      "\"quoted at both ends\"",
      "",
      "line\nbreak",
      "carriage\rreturn",
      "carriage\rreturn and \r\n both",
      ",",
      "\"",
      "\"\"",
      "  leading and trailing spaces  ",
      "(usually followed by `to') having the necessary means; \"able to swim\"",
  };
  return texts;
}

std::string tricky_csv() {
  std::string out(kCsvHeader);
  out += '\n';
  const auto& texts = tricky_texts();
  for (std::size_t i = 0; i < texts.size(); ++i) append_csv_row(out, texts[i], lexname(static_cast<int>(i)));
  return out;
}

std::string hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

}  // namespace

TEST_CASE("csv: a field is quoted iff it holds , \" CR or LF, with \" doubled", "[text][csv]") {
  const auto field = [](std::string_view f) {
    std::string out;
    append_csv_field(out, f);
    return out;
  };
  CHECK(field("plain text") == "plain text");
  CHECK(field("") == "");
  CHECK(field("a,b") == "\"a,b\"");
  CHECK(field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(field("a\nb") == "\"a\nb\"");
  CHECK(field("a\rb") == "\"a\rb\"");
  std::string row;
  append_csv_row(row, "x, y", "noun.animal");
  CHECK(row == "\"x, y\",noun.animal\n");
}

TEST_CASE("csv: written rows read back the same", "[text][csv]") {
  TempDir dir;
  write_file(dir.file("train.csv"), tricky_csv());
  const auto rows = read_labeled_csv(dir.file("train.csv"), lexnames());
  const auto& texts = tricky_texts();
  REQUIRE(rows.size() == texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    CHECK(rows[i].text == texts[i]);
    CHECK(rows[i].label == static_cast<std::int32_t>(i));
  }
}

TEST_CASE("csv: a file written with CRLF line ends reads the same", "[text][csv]") {
  TempDir dir;
  write_file(dir.file("train.csv"), "text,label\r\n\"a, b\",noun.act\r\nplain,adj.all\r\n");
  const auto rows = read_labeled_csv(dir.file("train.csv"), lexnames());
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].text == "a, b");
  CHECK(rows[0].label == 4);
  CHECK(rows[1].text == "plain");
  CHECK(rows[1].label == 0);
}

TEST_CASE("csv: Python's csv.reader reads our file as the same fields", "[text][csv][python]") {
  if (!std::filesystem::exists("/usr/bin/python3")) DDP_SKIP("no /usr/bin/python3 to compare with");
  TempDir dir;
  write_file(dir.file("train.csv"), tricky_csv());
  const char* script =
      "import csv, sys\n"
      "with open(sys.argv[1], newline='', encoding='utf-8') as f:\n"
      "    for row in csv.reader(f):\n"
      "        print(' '.join(x.encode('utf-8').hex() for x in row))\n";
  const auto r = ddp::test::run({"/usr/bin/python3", "-c", script, dir.file("train.csv")}, {}, 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::string expected = hex("text") + " " + hex("label") + "\n";
  const auto& texts = tricky_texts();
  for (std::size_t i = 0; i < texts.size(); ++i)
    expected += hex(texts[i]) + " " + hex(lexname(static_cast<int>(i))) + "\n";
  CHECK(r.output == expected);
}

TEST_CASE("csv: each damaged file is one line naming file:line and how to prepare again", "[text][csv]") {
  TempDir dir;
  const std::string path = dir.file("train.csv");
  const std::string hint = "; delete " + dir.path() + " and run `ddp-text --prepare_only --data_dir " + dir.path() +
                           "` to prepare it again";
  const auto error = [&](const std::string& content) {
    write_file(path, content);
    return text_error_of([&] { read_labeled_csv(path, lexnames()); });
  };
  CHECK(error("text,label\nok,noun.act\n\"never closed,noun.act\nmore,noun.act\n") ==
        path + ":3: a quoted field is not closed before the end of the file" + hint);
  CHECK(error("text,label\nok,noun.act\na,b,noun.act\n") == path + ":3: 3 fields, expected 2 (text,label)" + hint);
  CHECK(error("text,label\n\"multi\nline\",noun.act\nlonely\n") ==
        path + ":4: 1 field, expected 2 (text,label)" + hint);
  CHECK(error("text,label\nok,noun.act\n\nok,noun.act\n") == path + ":3: 1 field, expected 2 (text,label)" + hint);
  CHECK(error("text,label\nok,noun.beast\n") ==
        path + ":2: unknown label 'noun.beast' (not one of the 45 classes of labels.txt)" + hint);
  CHECK(error("ok,noun.act\n") == path + ":1: header is 'ok,noun.act', expected 'text,label'" + hint);
  CHECK(error("") == path + ":1: empty file, expected the header line 'text,label'" + hint);
  CHECK(error("text,label\nsay \"hi\",noun.act\n") ==
        path + ":2: a '\"' inside an unquoted field (such a field must be quoted, with '\"' doubled)" + hint);
  CHECK(error("text,label\n\"a\"b,noun.act\n") ==
        path + ":2: a character after a closing quote (a field is quoted only as a whole)" + hint);
  std::filesystem::remove(path);
  CHECK(text_error_of([&] { read_labeled_csv(path, lexnames()); }) ==
        path + " not found; run `ddp-text --prepare_only --data_dir " + dir.path() + "` (or just ddp-text) to prepare it");
}

TEST_CASE("csv: the last record may lack its line end", "[text][csv]") {
  TempDir dir;
  write_file(dir.file("t.csv"), "text,label\nlast,verb.weather");
  const auto rows = read_labeled_csv(dir.file("t.csv"), lexnames());
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].text == "last");
  CHECK(rows[0].label == 43);
}
