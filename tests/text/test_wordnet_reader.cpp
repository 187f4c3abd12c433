// The WordNet data-file reader on synthetic files: rows, the license header,
// satellites, and one exact line for each damaged or missing file.
#include <catch2/catch.hpp>

#include "ddp/text/wordnet_reader.h"
#include "test_support.h"
#include "text_test_files.h"

using namespace ddp::text;
using ddp::test::TempDir;
using ddp::test::write_file;
using ddp::text::test::license_header;
using ddp::text::test::synset_line;
using ddp::text::test::text_error_of;
using namespace std::string_literals;


TEST_CASE("wordnet reader: rows after the license header, gloss after the first '|', trimmed", "[text][wordnet]") {
  TempDir dir;
  const std::string path = dir.file("data.adj");
  write_file(path, license_header() +
                       synset_line("00001740", "00", 'a', "able", "(usually followed by `to') having means") +
                       // a satellite: ss_type 's', still a row of data.adj (letter 'a')
                       synset_line("00002312", "44", 's', "abaxial", "facing away | from the axis") +
                       "00003700 01 a 01 x 0 000 |\t \r\n");
  const auto rows = read_wordnet_file(path, 'a');
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].letter == 'a');
  CHECK(rows[0].offset == "00001740");
  CHECK(rows[0].lex_filenum == 0);
  CHECK(rows[0].gloss == "(usually followed by `to') having means");
  CHECK(rows[1].letter == 'a');
  CHECK(rows[1].offset == "00002312");
  CHECK(rows[1].lex_filenum == 44);
  CHECK(rows[1].gloss == "facing away | from the axis");
  CHECK(rows[2].lex_filenum == 1);
  CHECK(rows[2].gloss.empty());
}

TEST_CASE("wordnet reader: a missing file names the package and --wordnet_dir", "[text][wordnet]") {
  TempDir dir;
  CHECK(text_error_of([&] { read_wordnet_file(dir.file("data.noun"), 'n'); }) ==
        dir.file("data.noun") +
            " not found; install Debian's wordnet-base (apt-get install wordnet-base) or pass --wordnet_dir");
}

TEST_CASE("wordnet reader: each damaged line is one line naming file:line", "[text][wordnet]") {
  TempDir dir;
  const std::string path = dir.file("data.noun");
  const std::string good = synset_line("00001740", "03", 'n', "entity", "that which is perceived");
  const std::string fix =
      "; the file is damaged: reinstall wordnet-base (apt-get install --reinstall wordnet-base) or pass another "
      "--wordnet_dir";
  // The header is 29 lines, the good synset line 30: the bad one is line 31.
  const std::string at = path + ":31: ";
  SECTION("no '|'") {
    write_file(path, license_header() + good + "00001930 03 n 01 physical_entity 0 000 no bar here\n");
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) == at + "no '|' before a gloss in this line" + fix);
  }
  SECTION("an empty line in the middle") {
    write_file(path, license_header() + good + "\n" + good);
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) == at + "no '|' before a gloss in this line" + fix);
  }
  SECTION("lex_filenum 45") {
    write_file(path, license_header() + good + synset_line("00001930", "45", 'n', "x", "g"));
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) ==
          at + "lex_filenum '45' is not two digits in 00..44" + fix);
  }
  SECTION("lex_filenum of one digit") {
    write_file(path, license_header() + good + synset_line("00001930", "3", 'n', "x", "g"));
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) ==
          at + "lex_filenum '3' is not two digits in 00..44" + fix);
  }
  SECTION("lex_filenum not a number") {
    write_file(path, license_header() + good + synset_line("00001930", "-1", 'n', "x", "g"));
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) ==
          at + "lex_filenum '-1' is not two digits in 00..44" + fix);
  }
  SECTION("an offset of 7 digits") {
    write_file(path, license_header() + good + synset_line("0001930", "03", 'n', "x", "g"));
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) == at + "synset offset '0001930' is not 8 digits" + fix);
  }
  SECTION("an offset with a letter") {
    write_file(path, license_header() + good + synset_line("0000193x", "03", 'n', "x", "g"));
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) == at + "synset offset '0000193x' is not 8 digits" + fix);
  }
  SECTION("no synsets at all") {
    write_file(path, license_header());
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) ==
          path + ": holds no synset, only 29 license header lines" + fix);
  }
  SECTION("an empty file") {
    write_file(path, "");
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) ==
          path + ": holds no synset, only 0 license header lines" + fix);
  }
}

// Issue 23, defect 4: a NUL in a damaged line cut the message there (what()
// is a C string: the advice after it was lost), and an ESC reached the
// terminal raw (ESC[2J cleared it). Quoted as \xNN instead; a tab and
// UTF-8 text stay as they are.
TEST_CASE("wordnet reader: NUL, ESC and other control bytes of a damaged line are quoted as hex escapes", "[text][wordnet]") {
  TempDir dir;
  const std::string path = dir.file("data.noun");
  const std::string good = synset_line("00001740", "03", 'n', "entity", "that which is perceived");
  const std::string fix =
      "; the file is damaged: reinstall wordnet-base (apt-get install --reinstall wordnet-base) or pass another "
      "--wordnet_dir";
  const std::string at = path + ":31: ";
  SECTION("a NUL and an ESC[2J in the offset") {
    write_file(path, license_header() + good + "0000\0" "1\x1b[2J 03 n 01 x 0 000 | g\n"s);
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) ==
          at + "synset offset '0000\\x001\\x1b[2J' is not 8 digits" + fix);
  }
  SECTION("BEL, BS, 0xff and a tab in lex_filenum, UTF-8 kept") {
    write_file(path, license_header() + good + "00001930 \x07\x08\xff\t\xc3\xa9 n 01 x 0 000 | g\n");
    CHECK(text_error_of([&] { read_wordnet_file(path, 'n'); }) ==
          at + "lex_filenum '\\x07\\x08\\xff\t\xc3\xa9' is not two digits in 00..44" + fix);
  }
}

TEST_CASE("wordnet reader: the four files in order with their letters", "[text][wordnet]") {
  const auto& s = wordnet_sources();
  CHECK(std::string(s[0].file) == "data.noun");
  CHECK(s[0].letter == 'n');
  CHECK(std::string(s[1].file) == "data.verb");
  CHECK(s[1].letter == 'v');
  CHECK(std::string(s[2].file) == "data.adj");
  CHECK(s[2].letter == 'a');
  CHECK(std::string(s[3].file) == "data.adv");
  CHECK(s[3].letter == 'r');
}
